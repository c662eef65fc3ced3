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
import passmgr as pm
from codegen.llvm.cpu import accumulator_budget
from codegen.lower.kernels.gemm.packed import register_block
from egraph_ir import op
from egraph_ir.dims import Dim
from egraph_ir.op.mlas import dense_mlas_ref, matmul_mlas_ref
from egraph_ir.testing import assert_allclose


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


@pytest.mark.parametrize(
    "m,k,n,stride_k",
    [(49, 2304, 512, 256), (37, 300, 48, 128), (100, 20, 16, 1024), (37, 300, 40, 128)],
    ids=["slices-of-256", "a-short-last-slice", "one-slice", "columns-padded-to-panels"],
)
def test_dense_mlas_sums_in_mlas_order(m: int, k: int, n: int, stride_k: int) -> None:
    """dense_mlas on the packed kernel is its reference bit for bit: each slice of K a chain
    of FMAs from zero, added to the sums stored before (an epilogue fused after it)."""
    rng = np.random.default_rng(m + k)
    x = ir.var("x", shape=(m, k), dtype="float32")
    w = (rng.integers(-128, 128, (n, k)) * 0.0021).astype(np.float32)
    body = op.add(op.dense_mlas(x, ir.const(w), stride_k=stride_k), ir.const(np.float32(0.5)))
    exe = codegen.build(ir.Function([x], body))
    value = (rng.integers(0, 256, (m, k)) * 0.0173 - 1.3).astype(np.float32)
    want = dense_mlas_ref(value, w, stride_k) + np.float32(0.5)
    assert int((exe.run(x=value) != want).sum()) == 0
    assert [k.variant for k in exe.profile({"x": value}, repeats=1)] == ["packed"]
    assert (
        dense_mlas_ref(value, w, k) != dense_mlas_ref(value, w, stride_k)
    ).any() or k <= stride_k


@pytest.mark.parametrize(
    "m,k,n,stride_k", [(512, 2304, 64, 256), (37, 300, 48, 128)], ids=["slices", "short-last"]
)
def test_matmul_mlas_sums_in_mlas_order(m: int, k: int, n: int, stride_k: int) -> None:
    """matmul_mlas on its kernel (the constant's elements broadcast, the run-time rows read
    in place: a convolution's NCHW rows) is its reference bit for bit."""
    rng = np.random.default_rng(m + k)
    b = ir.var("b", shape=(k, n), dtype="float32")
    a = (rng.integers(-128, 128, (m, k)) * 0.0021).astype(np.float32)
    body = op.add(op.matmul_mlas(ir.const(a), b, stride_k=stride_k), ir.const(np.float32(0.5)))
    exe = codegen.build(ir.Function([b], body))
    value = (rng.integers(0, 256, (k, n)) * 0.0173 - 1.3).astype(np.float32)
    want = matmul_mlas_ref(a, value, stride_k) + np.float32(0.5)
    assert int((exe.run(b=value) != want).sum()) == 0
    assert [kernel.variant for kernel in exe.profile({"b": value}, repeats=1)] == ["mlas"]


@settings(max_examples=16, deadline=None)
@given(
    st.sampled_from([2, 5, 7, 64, "tokens"]),
    st.sampled_from([8, 40, 96]),
    st.sampled_from([64 + 1, 100, 300, 1000]),
    st.sampled_from(["none", "bias-relu", "tanh"]),
    st.integers(1, 3),
)
def test_columns_past_whole_panels_run_packed_and_equal_the_interpreter(
    m: int | str, k: int, n: int, epilogue: str, threads: int
) -> None:
    """A product whose columns are no multiple of 16 (a vocabulary of 50,257) runs on the
    packed kernel: the last panel's zero-padded columns are summed into a scratch and its
    real ones copied out; an in-place epilogue (a bias, a tanh) runs once on each column,
    at any thread count, for a symbolic row count too. (One row stays BLAS's GEMV:
    tests/codegen/runtime/test_runner.py.)"""
    rng = np.random.default_rng(n + k)
    rows = ir.size_var("tokens") if m == "tokens" else m
    x = ir.var("x", shape=(rows, k), dtype="float32")
    w = rng.standard_normal((n, k)).astype("float32")
    body = op.dense(x, ir.const(w))
    if epilogue == "bias-relu":
        body = op.relu(op.bias_add(body, ir.const(rng.standard_normal(n).astype("float32"))))
    elif epilogue == "tanh":
        body = op.tanh(op.add(body, ir.const(np.float32(0.25))))
    fn = ir.Function([x], body)
    with pm.PassContext(config={"codegen.num_threads": threads}):
        exe = codegen.build(fn)
    value = rng.standard_normal((3 if m == "tokens" else m, k)).astype("float32")
    assert [t.variant for t in exe.profile({"x": value}, repeats=1)] == ["packed"]
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))
