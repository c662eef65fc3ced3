"""A group that only concatenates (codegen/lower/joins.py): one copy loop per input, each
input read once, equal to numpy's concatenation for any axis and count of inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.loop_ir import For, Select, walk
from egraph_ir import op


@given(
    st.integers(1, 4),
    st.lists(st.integers(1, 5), min_size=2, max_size=9),
    st.integers(0, 3),
    st.sampled_from(["float32", "int8", "float64"]),
)
def test_a_join_equals_numpy_and_reads_each_input_once(
    rank: int, lengths: list[int], axis: int, dtype: str
) -> None:
    axis %= rank
    rest = [3, 2, 5, 4][:rank]
    shapes = [tuple(n if k == axis else d for k, d in enumerate(rest)) for n in lengths]
    xs = [ir.var(f"x{i}", shape=s, dtype=dtype) for i, s in enumerate(shapes)]
    exe = codegen.build(ir.Function(xs, op.concatenate(*xs, axis=axis)))
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": (rng.standard_normal(s) * 50).astype(dtype) for i, s in enumerate(shapes)}
    np.testing.assert_array_equal(exe.run(**feeds), np.concatenate(list(feeds.values()), axis))
    (kernel,) = exe.graph.kernels()
    stmts, exprs = walk(kernel.jit_kernels()[0].body)
    copies = [s for s in stmts if isinstance(s, For) and s.stop is not None]
    assert len(copies) == len(lengths)  # one copy loop per input
    assert sum(isinstance(e, Select) for e in exprs) == len(lengths)  # only their stops
