"""The int8 product (codegen/lower/kernels/gemm/int8.py): qnn_matmul / qnn_dense of uint8 activations and
constant int8 weights as byte words summed by vpdpbusd equal the interpreter's int32 sums
exactly, with the activations' zero point known only at run time (dynamic quantisation)
or constant, and with the rescale FuseOps puts in the epilogue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.lower.kernels.gemm import int8 as gemm_int8

from .....hosts import force_int8_kernels


@pytest.fixture(autouse=True, scope="module")
def _int8_kernels_on_any_cpu() -> Iterator[None]:
    """The int8 kernels are what these tests check, on any CPU (tests/hosts.py)."""
    with pytest.MonkeyPatch.context() as patch:
        force_int8_kernels(patch)
        yield


def _int8_products(exe: Any) -> int:
    return sum(
        getattr(k, "variant", "") == "int8" and k.kind == "gemm" for k in exe.graph.kernels()
    )


def _model(m: int, k: int, n: int, dense: bool, runtime_zero: bool, rescale: bool, seed: int):
    rng = np.random.default_rng(seed)
    a = (
        ir.var("a", shape=(2, m, k), dtype="uint8")
        if not dense
        else ir.var("a", shape=(m, k), dtype="uint8")
    )
    za = ir.var("za", shape=(), dtype="uint8")
    zero = za if runtime_zero else ir.const(np.array(rng.integers(0, 256), "uint8"))
    weights = rng.integers(-128, 128, (n, k) if dense else (k, n)).astype(np.int8)
    zb = ir.const(np.array(0, np.int8))
    product = (ir.op.qnn_dense if dense else ir.op.qnn_matmul)(a, ir.const(weights), zero, zb)
    if rescale:
        product = ir.op.multiply(ir.op.cast(product, dtype="float32"), ir.const(np.float32(1e-3)))
    params = [a, za] if runtime_zero else [a]
    return ir.infer_type(ir.IRModule.from_expr(ir.Function(params, product)))


@given(
    # (M, K, N): N not a multiple of 16 too (a classifier's 1000 columns)
    shape=st.sampled_from(
        [
            (5, 64, 32),
            (9, 128, 16),
            (8, 12, 48),
            (1, 4, 16),
            (17, 256, 64),
            (3, 16, 40),
            (1, 64, 1000),
        ]
    ),
    dense=st.booleans(),
    runtime_zero=st.booleans(),
    rescale=st.booleans(),
    seed=st.integers(0, 2**16),
)
@example(shape=(3, 16, 40), dense=True, runtime_zero=False, rescale=True, seed=3)
@settings(max_examples=8, deadline=None)
def test_int8_products_equal_the_reference(shape, dense, runtime_zero, rescale, seed) -> None:
    m, k, n = shape
    mod = _model(m, k, n, dense, runtime_zero, rescale, seed)
    exe = codegen.build(mod)
    assert _int8_products(exe) == 1 and len(exe.graph.kernels()) == 1
    rng = np.random.default_rng(seed + 1)
    inputs = [
        rng.integers(0, 256, p.checked_type.shape).astype("uint8") for p in mod["main"].params
    ]
    np.testing.assert_array_equal(exe.run(*inputs), ir.interpret(mod, *inputs))


def test_weights_pack_into_words_of_four_k() -> None:
    """Panel p, word w, column j holds k = 4w .. 4w + 3 of column p * W + j, little end
    first; the column sums are the weights' sums over k."""
    mod = _model(3, 8, 32, dense=False, runtime_zero=False, rescale=False, seed=1)
    call = mod["main"].body
    packed, sums = gemm_int8.pack(call)
    b = call.args[1].data
    width = packed.width  # 32 columns a panel with AVX-512, 16 with AVX2's registers
    assert packed.k == 2 and width in (16, 32) and packed.panels.shape == (32 // width, 2, width)
    as_bytes = packed.panels.view(np.int8).reshape(32 // width, 2, width, 4)
    np.testing.assert_array_equal(as_bytes[0, 1, 5], b[4:8, 5])
    np.testing.assert_array_equal(as_bytes[-1, 0, width - 1], b[0:4, 31])
    np.testing.assert_array_equal(sums, b.astype(np.int64).sum(axis=0))


def test_products_outside_the_kernel_are_lowered() -> None:
    """K not a multiple of 4, int8 activations, a weight zero point other than 0: no
    native form, so CanonicalizeQnn lowers them (exact float products)."""
    a = ir.var("a", shape=(4, 6), dtype="uint8")
    w = ir.const(np.ones((6, 16), np.int8))
    zero, zb = ir.const(np.array(3, "uint8")), ir.const(np.array(0, np.int8))
    odd_k = ir.op.qnn_matmul(a, w, zero, zb)
    shifted = ir.op.qnn_matmul(a, w, zero, ir.const(np.array(1, np.int8)))
    for call in (odd_k, shifted):
        typed = ir.infer_type(ir.IRModule.from_expr(ir.Function([a], call)))
        assert not gemm_int8.fits(typed["main"].body)
        exe = codegen.build(typed)
        assert _int8_products(exe) == 0
        x = np.random.default_rng(2).integers(0, 256, (4, 6)).astype("uint8")
        np.testing.assert_array_equal(exe.run(x), ir.interpret(typed, x))
