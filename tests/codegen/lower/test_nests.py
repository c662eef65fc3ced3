"""elementwise_nest: a group whose result is a constant pad along its innermost axis runs
each row as three loops (the padding before, the input's run, the padding after), so that
the run reads consecutive addresses instead of gathering; the values are the
interpreter's for any widths."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.loop_ir import For, Stmt
from egraph_ir import op


def _padded_silu(
    width: int, before: int, after: int, lead: tuple[int, ...] = (2, 3, 5)
) -> ir.Function:
    """x * sigmoid(x) padded by a row above and below and (before, after) columns: the
    float group an int8 EfficientNet's SiLU makes in front of a depthwise convolution."""
    x = ir.var("x", shape=(*lead, width))
    silu = op.multiply(x, op.sigmoid(x))
    pads = ((0, 0), (0, 0), (1, 1), (before, after))
    return ir.Function([x], op.pad(silu, pad_width=pads, pad_value=0.5))


def _sibling_loops(body: list[Stmt]) -> int:
    """The most For loops side by side in one body of a loop nest."""
    most, todo = 0, [body]
    while todo:
        stmts = todo.pop()
        loops = [s for s in stmts if isinstance(s, For)]
        most = max(most, len(loops))
        todo += [s.body for s in loops]
    return most


@settings(max_examples=8, deadline=None)
@given(
    width=st.integers(1, 40),
    before=st.integers(0, 3),
    after=st.integers(0, 3),
    lead=st.sampled_from([(2, 3, 5), (1, 4, 1), (1, 1, 1)]),  # (1, 1, 1): the rows are 3
    seed=st.integers(0, 2**16),
)
def test_a_padded_result_equals_the_interpreter(width, before, after, lead, seed) -> None:
    """Leading axes of one: the threads split the padded rows' axis or the row itself (a
    single row stays one loop: the threads split it)."""
    fn = _padded_silu(width, before, after, lead)
    x = np.random.default_rng(seed).standard_normal((*lead, width)).astype("float32")
    np.testing.assert_allclose(codegen.build(fn).run(x=x), ir.interpret(fn, x), rtol=1e-6)


def test_the_padded_row_is_three_loops() -> None:
    exe: Any = codegen.build(_padded_silu(24, 1, 2))
    kernels = [k for kernel in exe.graph.kernels() for k in kernel.jit_kernels()]
    assert len(kernels) == 1
    assert _sibling_loops(kernels[0].body) == 3


def test_a_single_padded_row_stays_one_loop_for_the_threads() -> None:
    """(1, 1, 300) padded along its last axis: the threads split the row itself, so the
    row is not cut into three (a nest without the split axis wrote past the output)."""
    x = ir.var("x", shape=(1, 1, 300))
    pads = ((0, 0), (0, 0), (2, 3))
    fn = ir.Function([x], op.pad(op.sigmoid(x), pad_width=pads, pad_value=0.5))
    exe: Any = codegen.build(fn)
    kernel = next(k for kernel in exe.graph.kernels() for k in kernel.jit_kernels())
    assert _sibling_loops(kernel.body) == 1
    value = np.random.default_rng(0).standard_normal((1, 1, 300)).astype("float32")
    np.testing.assert_allclose(exe.run(x=value), ir.interpret(fn, value), rtol=1e-6)
