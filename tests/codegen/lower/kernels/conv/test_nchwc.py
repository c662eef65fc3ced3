"""conv2d_nchwc kernels on channel-blocked data (codegen/lower/kernels/conv/nchwc/) and the layout
conversions around them: every form they take equals the interpreter, fused epilogues
included, and runs natively (no host fallback)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.lower.kernels.conv.nchwc import pointwise as nchwc_pointwise
from codegen.lower.kernels.conv.nchwc.depthwise import BlockedDepthwise
from codegen.lower.kernels.conv.nchwc.pointwise import BlockedPointwise, pointwise_layout
from codegen.lower.kinds import Unsupported
from codegen.lower.select import CHOOSERS
from egraph_ir import op
from egraph_ir.testing import assert_allclose

from .blocked_shapes import depthwise_geometry, pointwise_geometry

NATIVE = {"codegen.host_fallback": False}


def _blocked(x: ir.Expr) -> ir.Expr:
    return op.layout_transform(x, src_layout="NCHW", dst_layout="NCHW16c")


def _plain(x: ir.Expr) -> ir.Expr:
    return op.layout_transform(x, src_layout="NCHW16c", dst_layout="NCHW")


def _epilogue(draw: st.DrawFn, body: ir.Expr, o: int, rng, params, inputs) -> ir.Expr:
    """bias + clip (MobileNet), SiLU (EfficientNet), a residual add, or none."""
    kind = draw(st.sampled_from(["none", "bias_clip", "silu", "residual"]))
    if kind == "bias_clip":
        bias = ir.const(rng.standard_normal((1, o // 16, 1, 1, 16)).astype("float32"))
        return op.clip(op.add(body, bias), a_min=0.0, a_max=6.0)
    if kind == "silu":
        return op.multiply(body, op.sigmoid(body))
    if kind == "residual":
        shape = ir.infer_type(ir.Function(list(params), body)).body.checked_type.shape
        skip = ir.var("skip", shape=shape)
        params.append(skip)
        inputs["skip"] = rng.standard_normal(shape).astype("float32")
        return op.add(body, skip)
    return body


@st.composite
def depthwise_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    g = draw(depthwise_geometry())
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=g.blocked)
    k = g.kernel
    weights = ir.const((rng.standard_normal((g.c, 1, k, k)) / k).astype("float32"))
    params, inputs = [x], {"x": rng.standard_normal(g.blocked).astype("float32")}
    conv = op.conv2d_nchwc(
        x, weights, strides=g.strides, padding=g.padding, dilation=g.dilation, groups=g.c
    )
    return ir.Function(params, _epilogue(draw, conv, g.c, rng, params, inputs)), inputs


@st.composite
def pointwise_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    """A pointwise geometry (blocked_shapes.py) with an epilogue."""
    g = draw(pointwise_geometry())
    o = g.o
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=g.data_shape)
    weights = ir.const((rng.standard_normal((o, g.c, 1, 1)) / np.sqrt(g.c)).astype("float32"))
    params, inputs = [x], {"x": rng.standard_normal(g.data_shape).astype("float32")}
    conv = op.conv2d_nchwc(x, weights, **g.layouts)
    if g.out_blocked:
        return ir.Function(params, _epilogue(draw, conv, o, rng, params, inputs)), inputs
    if draw(st.booleans()):  # NCHW's own epilogue: a bias along axis 1, ReLU6
        bias = ir.const(rng.standard_normal(o).astype("float32"))
        conv = op.clip(op.bias_add(conv, bias, axis=1), a_min=0.0, a_max=6.0)
    return ir.Function(params, conv), inputs


def _build_native(fn: ir.Function) -> codegen.Executable:
    with pm.PassContext(config=NATIVE):
        exe = codegen.build(fn)
    assert "host" not in exe.kernel_kinds()
    return exe


@given(depthwise_cases())
def test_every_blocked_depthwise_form_matches_the_interpreter(case) -> None:
    fn, inputs = case
    exe = _build_native(fn)
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))


@given(pointwise_cases())
def test_every_blocked_pointwise_form_matches_the_interpreter(case) -> None:
    fn, inputs = case
    exe = _build_native(fn)
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))


@pytest.mark.parametrize("panels_inner", [False, True])
@pytest.mark.parametrize("out_layout", ["NCHW16c", "NCHW"])
def test_a_batch_runs_item_by_item_through_the_pointwise_kernel(
    out_layout: str, panels_inner: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At batch > 1 the threads share (item, panel, part) iterations, an item's panels in
    turn (its input stays in cache), or, where an item's input overflows the L2 share,
    (item, part) iterations running every panel on each block of pixels: every item, with
    a residual, at 1 to 3 threads. (The share is shrunk here: the item's input is 31.7 KB,
    its three panels 15 KB.)"""
    monkeypatch.setattr(nchwc_pointwise, "L2_SHARE", 20_000 if panels_inner else 10**9)
    rng = np.random.default_rng(3)
    o = 48 if out_layout == "NCHW16c" else 40
    x = ir.var("x", shape=(3, 5, 9, 11, 16))
    weights = ir.const((rng.standard_normal((o, 80, 1, 1)) / 9).astype("float32"))
    conv = op.conv2d_nchwc(x, weights, out_layout=out_layout)
    out_shape = (3, o // 16, 9, 11, 16) if out_layout == "NCHW16c" else (3, o, 9, 11)
    skip = ir.var("skip", shape=out_shape)
    fn = ir.Function([x, skip], op.add(conv, skip))
    inputs = {"x": rng.standard_normal((3, 5, 9, 11, 16)).astype("float32")}
    inputs["skip"] = rng.standard_normal(out_shape).astype("float32")
    for threads in (1, 2, 3):
        with pm.PassContext(config={**NATIVE, "codegen.num_threads": threads}):
            exe = codegen.build(fn)
        assert [k.variant for k in exe.graph.kernels()] == ["nchwc-pointwise"]
        assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs))
    layout = pointwise_layout(ir.infer_type(ir.Function([x], conv)).body)
    assert layout.count == 3 and layout.panels_inner == panels_inner
    assert layout.items == 3 and layout.work == 3 * layout.shared_panels * layout.splits


@given(
    st.sampled_from([("NCHW", "NCHW16c"), ("NCHW16c", "NCHW"), ("NCHW", "NCHW8c")]),
    st.integers(1, 2),
    st.integers(1, 3),
    st.integers(1, 9),
)
def test_layout_conversions_compile_to_the_reference_index_map(layouts, n, blocks, side) -> None:
    src, dst = layouts
    shape = (n, blocks * 16, side, side) if src == "NCHW" else (n, blocks, side, side, 16)
    x = ir.var("x", shape=shape)
    fn = ir.Function([x], op.layout_transform(x, src_layout=src, dst_layout=dst))
    value = np.random.default_rng(side).standard_normal(shape).astype("float32")
    np.testing.assert_array_equal(_build_native(fn).run(x=value), ir.interpret(fn, x=value))


def test_a_mobilenet_block_in_blocked_layout_runs_its_kernels() -> None:
    """expand 1x1 -> depthwise 3x3 stride 2 -> project 1x1, converted once at each end:
    the blocked kernels are chosen, and the block agrees with its NCHW form."""
    rng = np.random.default_rng(3)
    x = ir.var("x", shape=(1, 32, 28, 28))

    def w(*shape: int) -> ir.Expr:
        scale = 1.0 / np.sqrt(np.prod(shape[1:]))  # a trained layer's: outputs O(1)
        return ir.const((rng.standard_normal(shape) * scale).astype("float32"))

    we, wd, wp = w(96, 32, 1, 1), w(96, 1, 3, 3), w(32, 96, 1, 1)
    blocked = _blocked(x)
    blocked = op.clip(op.conv2d_nchwc(blocked, we), a_min=0.0, a_max=6.0)
    blocked = op.conv2d_nchwc(blocked, wd, strides=(2, 2), padding=(1,), groups=96)
    blocked = op.conv2d_nchwc(op.clip(blocked, a_min=0.0, a_max=6.0), wp)
    plain = op.clip(op.conv2d(x, we), a_min=0.0, a_max=6.0)
    plain = op.conv2d(plain, wd, strides=(2, 2), padding=(1,), groups=96)
    plain = op.conv2d(op.clip(plain, a_min=0.0, a_max=6.0), wp)
    exe = _build_native(ir.Function([x], _plain(blocked)))
    value = rng.standard_normal((1, 32, 28, 28)).astype("float32")
    expected = ir.interpret(ir.Function([x], plain), x=value)
    assert_allclose(exe.run(x=value), expected)
    labels = {k.label for k in exe.profile({"x": value}, repeats=1)}
    assert {"conv/nchwc-pointwise", "conv/nchwc-depthwise"} <= labels


def _anchor(x_shape: tuple[int, ...], w_shape: tuple[int, ...], **attrs: object) -> ir.Call:
    x = ir.var("x", shape=x_shape)
    w = ir.const(np.zeros(w_shape, "float32"))
    return ir.infer_type(ir.Function([x], op.conv2d_nchwc(x, w, **attrs))).body


def test_the_blocked_kernels_take_depthwise_and_pointwise_forms_only() -> None:
    choose = CHOOSERS["conv2d_nchwc"]
    assert isinstance(choose(_anchor((1, 2, 8, 8, 16), (32, 1, 3, 3), groups=32)), BlockedDepthwise)
    assert isinstance(choose(_anchor((1, 2, 8, 8, 16), (48, 32, 1, 1))), BlockedPointwise)
    with pytest.raises(Unsupported):  # a 3x3 of one group on blocks: its reference on the host
        choose(_anchor((1, 2, 8, 8, 16), (16, 32, 3, 3), padding=(1,)))
    assert isinstance(  # from NCHW data (a stem): the pointwise kernel, a scalar per tap
        choose(_anchor((1, 3, 8, 8), (32, 3, 3, 3), padding=(1,), data_layout="NCHW")),
        BlockedPointwise,
    )
    with pytest.raises(Unsupported):  # blocks of 8: not this machine's vectors
        choose(
            _anchor(
                (1, 4, 8, 8, 8), (32, 1, 3, 3), groups=32, data_layout="NCHW8c", out_layout="NCHW8c"
            )
        )


def test_a_blocked_form_without_a_kernel_still_runs_on_the_host() -> None:
    x = ir.var("x", shape=(1, 2, 6, 6, 16))
    w = ir.const(np.random.default_rng(0).standard_normal((16, 32, 3, 3)).astype("float32"))
    fn = ir.Function([x], op.conv2d_nchwc(x, w, padding=(1,)))
    value = np.random.default_rng(1).standard_normal((1, 2, 6, 6, 16)).astype("float32")
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"host": 1}
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


@st.composite
def window_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    """Any window from NCHW data into blocks (an RGB stem): strides, padding, dilation."""
    c, o = draw(st.sampled_from([1, 3, 5])), 16 * draw(st.integers(1, 3))
    kernel = draw(st.sampled_from([1, 2, 3, 5]))
    strides = draw(st.sampled_from([(1, 1), (2, 2), (1, 2)]))
    dilation = draw(st.sampled_from([(1, 1), (2, 2)]))
    padding = draw(st.sampled_from([(0,), (1,), (2,), (0, 1, 2, 0)]))
    n = draw(st.integers(1, 2))
    h = draw(st.integers(dilation[0] * (kernel - 1) + 1, 17))
    w = draw(st.integers(dilation[1] * (kernel - 1) + 1, 17))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=(n, c, h, w))
    weights = ir.const((rng.standard_normal((o, c, kernel, kernel)) / kernel).astype("float32"))
    params, inputs = [x], {"x": rng.standard_normal((n, c, h, w)).astype("float32")}
    conv = op.conv2d_nchwc(
        x, weights, strides=strides, padding=padding, dilation=dilation, data_layout="NCHW"
    )
    return ir.Function(params, _epilogue(draw, conv, o, rng, params, inputs)), inputs


@given(window_cases())
def test_every_window_from_nchw_into_blocks_matches_the_interpreter(case) -> None:
    fn, inputs = case
    exe = _build_native(fn)
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))
