"""qnn_conv2d_nchwc kernels on bytes of 16 channels (codegen/lower/kernels/conv/nchwc/int8.py):
every form they take equals the interpreter bit for bit, with the int8 epilogues (a
blocked bias, a requantize per tensor or per channel) fused, and runs natively."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.llvm.mathlib import host_has_vnni
from codegen.lower.kernels.conv.nchwc import pointwise as nchwc_pointwise
from codegen.lower.kernels.conv.nchwc.int8 import (
    Int8BlockedDepthwise,
    Int8BlockedPointwise,
    word_layout,
)
from codegen.lower.kinds import Unsupported
from codegen.lower.select import CHOOSERS
from egraph_ir import op

from .blocked_shapes import depthwise_geometry, pointwise_geometry

pytestmark = pytest.mark.skipif(not host_has_vnni(), reason="the blocked int8 kernels need VNNI")
NATIVE = {"codegen.host_fallback": False}


def _requantized(draw: st.DrawFn, body: ir.Expr, o: int, blocked: bool, rng) -> ir.Expr:
    """A bias (blocked: (1, O/16, 1, 1, 16)), then the requantize to uint8: one scale, or
    one per output channel ((C, 1, 1); blocked (C/16, 1, 1, 16)), or none (int32 out)."""
    bias = rng.integers(-3000, 3000, o).astype("int32")
    shape = (1, o // 16, 1, 1, 16) if blocked else (1, o, 1, 1)
    body = op.add(body, ir.const(bias.reshape(shape)))
    kind = draw(st.sampled_from(["tensor", "channel", "none"]))
    zero = ir.const(np.array(draw(st.integers(0, 255)), "uint8"))
    if kind == "tensor":
        return op.requantize(body, ir.const(np.array(rng.uniform(1e-4, 5e-3), "float32")), zero)
    if kind == "channel":
        scales = rng.uniform(1e-4, 5e-3, o).astype("float32")
        return op.requantize(
            body, ir.const(scales.reshape((o // 16, 1, 1, 16) if blocked else (o, 1, 1))), zero
        )
    return body


def _zero(draw: st.DrawFn) -> ir.Expr:
    return ir.const(np.array(draw(st.sampled_from([0, 0, 3, 128, 255])), "uint8"))


@st.composite
def depthwise_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    g = draw(depthwise_geometry())
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=g.blocked, dtype="uint8")
    weights = ir.const(rng.integers(-128, 128, (g.c, 1, g.kernel, g.kernel)).astype("int8"))
    conv = op.qnn_conv2d_nchwc(
        x, weights, _zero(draw), ir.const(np.array(0, "int8")),
        strides=g.strides, padding=g.padding, dilation=g.dilation, groups=g.c,
    )  # fmt: skip
    inputs = {"x": rng.integers(0, 256, g.blocked).astype("uint8")}
    return ir.Function([x], _requantized(draw, conv, g.c, True, rng)), inputs


@st.composite
def pointwise_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    """A pointwise geometry (blocked_shapes.py), requantized."""
    g = draw(pointwise_geometry())
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=g.data_shape, dtype="uint8")
    weights = ir.const(rng.integers(-128, 128, (g.o, g.c, 1, 1)).astype("int8"))
    zeros = _zero(draw), ir.const(np.array(0, "int8"))
    conv = op.qnn_conv2d_nchwc(x, weights, *zeros, **g.layouts)
    inputs = {"x": rng.integers(0, 256, g.data_shape).astype("uint8")}
    return ir.Function([x], _requantized(draw, conv, g.o, g.out_blocked, rng)), inputs


@st.composite
def window_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    """Any window over a few NCHW channels into blocks (an RGB stem: 3x3 stride 2, 7x7)."""
    c, o = draw(st.sampled_from([1, 3, 4, 5])), 16 * draw(st.integers(1, 3))
    kernel = draw(st.sampled_from([1, 3, 7]))
    strides = draw(st.sampled_from([(1, 1), (2, 2)]))
    padding = draw(st.sampled_from([(0,), (1,), (3,), (0, 1, 2, 0)]))
    n = draw(st.integers(1, 2))
    h, w = draw(st.integers(kernel, 17)), draw(st.integers(kernel, 17))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=(n, c, h, w), dtype="uint8")
    weights = ir.const(rng.integers(-128, 128, (o, c, kernel, kernel)).astype("int8"))
    conv = op.qnn_conv2d_nchwc(
        x, weights, _zero(draw), ir.const(np.array(0, "int8")),
        strides=strides, padding=padding, data_layout="NCHW",
    )  # fmt: skip
    inputs = {"x": rng.integers(0, 256, (n, c, h, w)).astype("uint8")}
    return ir.Function([x], _requantized(draw, conv, o, True, rng)), inputs


def _build_native(fn: ir.Function) -> codegen.Executable:
    with pm.PassContext(config=NATIVE):
        exe = codegen.build(fn)
    assert "host" not in exe.kernel_kinds()
    assert len(list(exe.graph.kernels())) == 1  # the epilogue fused into the convolution
    return exe


@given(depthwise_cases())
def test_every_int8_blocked_depthwise_form_matches_the_interpreter(case) -> None:
    fn, inputs = case
    np.testing.assert_array_equal(_build_native(fn).run(**inputs), ir.interpret(fn, **inputs))


@given(pointwise_cases())
def test_every_int8_blocked_pointwise_form_matches_the_interpreter(case) -> None:
    fn, inputs = case
    np.testing.assert_array_equal(_build_native(fn).run(**inputs), ir.interpret(fn, **inputs))


@given(window_cases())
def test_every_int8_window_into_blocks_matches_the_interpreter(case) -> None:
    fn, inputs = case
    np.testing.assert_array_equal(_build_native(fn).run(**inputs), ir.interpret(fn, **inputs))


def _anchor(x_shape: tuple[int, ...], w_shape: tuple[int, ...], **attrs: object) -> ir.Call:
    x = ir.var("x", shape=x_shape, dtype="uint8")
    w = ir.const(np.zeros(w_shape, "int8"))
    zeros = ir.const(np.array(0, "uint8")), ir.const(np.array(0, "int8"))
    return ir.infer_type(ir.Function([x], op.qnn_conv2d_nchwc(x, w, *zeros, **attrs))).body


def test_the_blocked_int8_kernels_take_depthwise_and_pointwise_forms_only() -> None:
    choose = CHOOSERS["qnn_conv2d_nchwc"]
    depthwise = _anchor((1, 2, 8, 8, 16), (32, 1, 3, 3), groups=32, padding=(1,))
    assert isinstance(choose(depthwise), Int8BlockedDepthwise)
    assert isinstance(choose(_anchor((1, 2, 8, 8, 16), (48, 32, 1, 1))), Int8BlockedPointwise)
    for other in (
        _anchor((1, 2, 8, 8, 16), (16, 32, 3, 3), padding=(1,)),  # a window over blocks
        _anchor((1, 2, 8, 8, 16), (48, 32, 1, 1), strides=(2, 2)),  # a strided 1x1
        _anchor((1, 2, 8, 8, 16), (48, 32, 1, 1), pairs="saturating"),  # not exact sums
    ):
        with pytest.raises(Unsupported):  # its reference on the host
            choose(other)


@pytest.mark.parametrize("panels_inner", [False, True])
@pytest.mark.parametrize("out_layout", ["NCHW16c", "NCHW"])
def test_a_batch_runs_item_by_item_through_the_int8_pointwise_kernel(
    out_layout: str, panels_inner: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At batch > 1 the threads share (item, panel, part) iterations, or, where an item's
    input overflows the L2 share, run every panel on each block of pixels: every item
    equals the interpreter at 1 to 3 threads, requantized per channel. (The share is
    shrunk here so the small case takes the second way.)"""
    monkeypatch.setattr(nchwc_pointwise, "L2_SHARE", 20_000 if panels_inner else 10**9)
    rng = np.random.default_rng(3)
    o = 48 if out_layout == "NCHW16c" else 40
    x = ir.var("x", shape=(3, 5, 9, 11, 16), dtype="uint8")
    weights = ir.const(rng.integers(-128, 128, (o, 80, 1, 1)).astype("int8"))
    zeros = ir.const(np.array(7, "uint8")), ir.const(np.array(0, "int8"))
    conv = op.qnn_conv2d_nchwc(x, weights, *zeros, out_layout=out_layout)
    scales = rng.uniform(1e-4, 1e-3, o).astype("float32")
    shape = (o // 16, 1, 1, 16) if out_layout == "NCHW16c" else (o, 1, 1)
    fn = ir.Function([x], op.requantize(conv, ir.const(scales.reshape(shape)), zeros[0]))
    value = rng.integers(0, 256, (3, 5, 9, 11, 16)).astype("uint8")
    for threads in (1, 2, 3):
        with pm.PassContext(config={**NATIVE, "codegen.num_threads": threads}):
            exe = codegen.build(fn)
        assert [k.variant for k in exe.graph.kernels()] == ["int8-nchwc-pointwise"]
        np.testing.assert_array_equal(exe.run(x=value), ir.interpret(fn, x=value))
    layout = word_layout(ir.infer_type(ir.Function([x], conv)).body)
    assert layout.panels_inner == panels_inner and layout.items == 3
