"""The packed product's register block fits the host's registers (no accumulator spilled
to the stack: 8 x 2 16-lane vectors are 32 of AVX2's 16 registers), and products at
every block shape equal numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.llvm.cpu import accumulator_budget
from codegen.lower.kernels.gemm.packed import register_block
from egraph_ir import op
from egraph_ir.dims import Dim


@pytest.mark.parametrize("m", [1, 3, 6, 7, 64, 197, ir.size_var("tokens")])
@pytest.mark.parametrize("n", [16, 32, 48, 768])
def test_the_register_block_fits_the_budget(m: int | Dim, n: int) -> None:
    mr, xv = register_block(m, n)
    assert mr * xv <= accumulator_budget() and n % (16 * xv) == 0
    assert mr >= 1 and (isinstance(m, Dim) or mr <= m)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 40), st.sampled_from([8, 24, 64]), st.sampled_from([16, 32, 80]))
def test_products_at_drawn_sizes_equal_numpy(m: int, k: int, n: int) -> None:
    """Row counts around the block (a tail of m % MR rows) and one or two vectors a panel."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    x = ir.var("x", shape=(m, k), dtype="float32")
    w = rng.standard_normal((n, k)).astype("float32")
    exe = codegen.build(ir.Function([x], op.dense(x, ir.const(w))))
    value = rng.standard_normal((m, k)).astype("float32")
    np.testing.assert_allclose(exe.run(x=value), value @ w.T, rtol=1e-4, atol=1e-4)
