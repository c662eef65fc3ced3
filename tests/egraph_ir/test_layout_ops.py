"""layout_transform, conv2d_nchwc and qnn_conv2d_nchwc (egraph_ir/op/layout.py): their references against
plain numpy, their shape rules, their errors, and their ONNX export through ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import egraph_ir as ir
from egraph_ir import op
from egraph_ir.op.layout import layout_transform_ref, parse_layout
from egraph_ir.op.nn import conv2d_ref, norm_padding


def nchw16c(x: np.ndarray, block: int = 16) -> np.ndarray:
    """The blocked layout written out by hand: [n, c // b, h, w, c % b]."""
    n, c, h, w = x.shape
    return x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2)


@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 5), st.integers(1, 5))
def test_blocking_puts_each_channel_at_its_block_and_lane(n, blocks, h, w) -> None:
    x = np.arange(n * blocks * 16 * h * w, dtype=np.float32).reshape(n, blocks * 16, h, w)
    blocked = layout_transform_ref(x, "NCHW", "NCHW16c")
    np.testing.assert_array_equal(blocked, nchw16c(x))
    np.testing.assert_array_equal(layout_transform_ref(blocked, "NCHW16c", "NCHW"), x)


def test_other_layouts_convert_through_their_primal_axes() -> None:
    x = np.arange(2 * 32 * 3 * 4, dtype=np.float32).reshape(2, 32, 3, 4)
    nhwc = layout_transform_ref(x, "NCHW", "NHWC")
    np.testing.assert_array_equal(nhwc, x.transpose(0, 2, 3, 1))
    eight = layout_transform_ref(nhwc, "NHWC", "NCHW8c")
    np.testing.assert_array_equal(eight, nchw16c(x, 8))
    np.testing.assert_array_equal(layout_transform_ref(eight, "NCHW8c", "NCHW16c"), nchw16c(x))


@pytest.mark.parametrize(
    "layout, message",
    [
        ("NCHW16", "cannot read"),
        ("NCHC", "twice"),
        ("NCHW4c16c", "twice"),
        ("NHW16c", "without axis C"),
    ],
)
def test_malformed_layouts_are_named(layout: str, message: str) -> None:
    with pytest.raises(ir.CompilerError, match=message):
        parse_layout(layout)


def test_a_channel_count_that_does_not_split_is_a_shape_error() -> None:
    x = ir.var("x", shape=(1, 24, 4, 4))
    with pytest.raises(ir.CompilerError, match="24 does not split by 16"):
        ir.infer_type(ir.Function([x], op.layout_transform(x, "NCHW", "NCHW16c")))


@given(
    st.sampled_from([(32, 32), (32, 16), (16, 48)]),
    st.sampled_from([1, 3]),
    st.sampled_from([(1, 1), (2, 2)]),
    st.booleans(),
)
def test_the_blocked_convolution_is_the_plain_one_between_conversions(
    channels, kernel, strides, depthwise
) -> None:
    c, o = (channels[0], channels[0]) if depthwise else channels
    groups = c if depthwise else 1
    rng = np.random.default_rng(c + o + kernel)
    x = rng.standard_normal((1, c, 7, 6)).astype(np.float32)
    w = rng.standard_normal((o, c // groups, kernel, kernel)).astype(np.float32)
    attrs = dict(strides=strides, padding=(kernel // 2,), dilation=(1, 1), groups=groups)
    layouts = dict(data_layout="NCHW16c", out_layout="NCHW16c")
    blocked = ir.op.get("conv2d_nchwc").reference(nchw16c(x), w, **attrs, **layouts)
    np.testing.assert_allclose(blocked, nchw16c(conv2d_ref(x, w, **attrs)), rtol=1e-5, atol=1e-5)


def test_conv2d_nchwc_types_and_errors() -> None:
    x = ir.var("x", shape=(1, 2, 8, 8, 16))
    w = ir.const(np.zeros((48, 32, 3, 3), "float32"))
    call = ir.infer_type(ir.Function([x], op.conv2d_nchwc(x, w, strides=(2, 2), padding=(1,))))
    assert call.body.checked_type.shape == (1, 3, 4, 4, 16)
    with pytest.raises(ir.CompilerError, match="40 does not split by 16"):
        ir.infer_type(
            ir.Function([x], op.conv2d_nchwc(x, ir.const(np.zeros((40, 32, 1, 1), "float32"))))
        )
    with pytest.raises(ir.CompilerError, match="takes layouts NCHW and NCHW<b>c"):
        ir.infer_type(ir.Function([x], op.conv2d_nchwc(x, w, data_layout="NHWC")))
    plain_out = op.conv2d_nchwc(x, w, padding=(1,), out_layout="NCHW")
    assert ir.infer_type(ir.Function([x], plain_out)).body.checked_type.shape == (1, 48, 8, 8)


@given(
    st.sampled_from([(32, 32), (32, 16), (16, 48)]),
    st.sampled_from([1, 3]),
    st.sampled_from([(1, 1), (2, 2)]),
    st.booleans(),
    st.sampled_from([("NCHW16c", "NCHW16c"), ("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]),
)
def test_the_blocked_int8_convolution_is_qnn_conv2d_between_conversions(
    channels, kernel, strides, depthwise, layouts
) -> None:
    c, o = (channels[0], channels[0]) if depthwise else channels
    groups = c if depthwise else 1
    rng = np.random.default_rng(c + o + kernel)
    x = rng.integers(0, 256, (1, c, 7, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, (o, c // groups, kernel, kernel)).astype(np.int8)
    zeros = (np.array(3, np.uint8), np.array(0, np.int8))
    attrs = dict(strides=strides, padding=(kernel // 2,), dilation=(1, 1), groups=groups)
    data, out = layouts
    x_in = nchw16c(x) if data == "NCHW16c" else x
    blocked = ir.op.get("qnn_conv2d_nchwc").reference(
        x_in, w, *zeros, **attrs, pairs="exact", data_layout=data, out_layout=out
    )
    plain = ir.op.get("qnn_conv2d").reference(x, w, *zeros, **attrs)
    np.testing.assert_array_equal(blocked, nchw16c(plain) if out == "NCHW16c" else plain)


def test_qnn_conv2d_nchwc_types_and_errors() -> None:
    x = ir.var("x", shape=(1, 2, 8, 8, 16), dtype="uint8")
    w = ir.const(np.zeros((48, 32, 1, 1), "int8"))
    zeros = ir.const(np.array(0, "uint8")), ir.const(np.array(0, "int8"))
    call = ir.infer_type(ir.Function([x], op.qnn_conv2d_nchwc(x, w, *zeros)))
    assert call.body.checked_type == ir.TensorType((1, 3, 8, 8, 16), "int32")
    plain_out = op.qnn_conv2d_nchwc(x, w, *zeros, out_layout="NCHW")
    assert ir.infer_type(ir.Function([x], plain_out)).body.checked_type.shape == (1, 48, 8, 8)
    with pytest.raises(ir.CompilerError, match="takes layouts NCHW and NCHW<b>c"):
        ir.infer_type(ir.Function([x], op.qnn_conv2d_nchwc(x, w, *zeros, data_layout="NHWC")))
    with pytest.raises(ir.CompilerError, match="40 does not split by 16"):
        w40 = ir.const(np.zeros((40, 32, 1, 1), "int8"))
        ir.infer_type(ir.Function([x], op.qnn_conv2d_nchwc(x, w40, *zeros)))


def test_both_ops_export_to_onnx_and_run_in_onnx_runtime() -> None:
    ort = pytest.importorskip("onnxruntime")
    from egraph_ir.frontend.onnx.export.model import to_onnx

    rng = np.random.default_rng(0)
    x = ir.var("x", shape=(1, 32, 6, 6))
    w = ir.const(rng.standard_normal((32, 1, 3, 3)).astype("float32"))
    blocked = op.conv2d_nchwc(op.layout_transform(x, "NCHW", "NCHW16c"), w, padding=(1,), groups=32)
    fn = ir.Function([x], op.layout_transform(blocked, "NCHW16c", "NCHW"))
    value = rng.standard_normal((1, 32, 6, 6)).astype("float32")
    session = ort.InferenceSession(to_onnx(ir.IRModule.from_expr(fn)).SerializeToString())
    (out,) = session.run(None, {"x": value})
    np.testing.assert_allclose(out, ir.interpret(fn, value), rtol=1e-5, atol=1e-5)


def test_conv2d_winograd_is_the_blocked_3x3_convolution_and_exports_to_onnx() -> None:
    ort = pytest.importorskip("onnxruntime")
    from egraph_ir.frontend.onnx.export.model import to_onnx

    rng = np.random.default_rng(4)
    x = ir.var("x", shape=(1, 2, 6, 8, 16))
    w = rng.standard_normal((16, 32, 3, 3)).astype("float32")
    value = rng.standard_normal((1, 2, 6, 8, 16)).astype("float32")
    fn = ir.Function([x], op.conv2d_winograd(x, ir.const(w), padding=(1, 0, 1, 2)))
    expected = nchw16c(
        conv2d_ref(
            np.asarray(value.transpose(0, 1, 4, 2, 3).reshape(1, 32, 6, 8)),
            w,
            (1, 1),
            (1, 0, 1, 2),
            (1, 1),
            1,
        )
    )
    np.testing.assert_allclose(ir.interpret(fn, value), expected, rtol=1e-5, atol=1e-5)
    session = ort.InferenceSession(to_onnx(ir.IRModule.from_expr(fn)).SerializeToString())
    (out,) = session.run(None, {"x": value})
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_conv2d_winograd_takes_3x3_weights_only() -> None:
    x = ir.var("x", shape=(1, 2, 8, 8, 16))
    with pytest.raises(ir.CompilerError, match="takes a 3x3 OIHW weight"):
        ir.infer_type(
            ir.Function([x], op.conv2d_winograd(x, ir.const(np.zeros((16, 32, 1, 1), "float32"))))
        )


@given(
    st.integers(1, 3),
    st.sampled_from([(1, 1), (3, 3), (2, 3)]),
    st.sampled_from([(1, 1), (2, 2)]),
    st.sampled_from([(0,), (1,), (1, 2, 0, 1)]),
    st.sampled_from([(1, 1), (2, 1)]),
)
def test_im2col_rows_are_the_windows_in_row_column_channel_order(
    channels: int, kernel: tuple[int, int], strides, padding, dilation
) -> None:
    """Row (n, oy, ox), entry (i, j, c): x[n, c, oy * sh + i * dh - top, ...], the padding
    pad_value; the compiled kernel gives the reference's bytes."""
    import codegen

    rng = np.random.default_rng(channels)
    x = rng.integers(0, 256, (2, channels, 7, 8)).astype("uint8")
    attrs = dict(kernel_size=kernel, strides=strides, padding=padding, dilation=dilation)
    fn = ir.Function(
        [v := ir.var("x", shape=x.shape, dtype="uint8")], op.im2col(v, pad_value=9.0, **attrs)
    )
    got = ir.interpret(fn, x=x)
    top, left, _, _ = norm_padding(padding)
    (sh, sw), (dh, dw) = strides, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (top, 8), (left, 8)), constant_values=9)
    oh, ow = _out_size(x.shape, kernel, strides, padding, dilation)
    for n, oy, ox in [(0, 0, 0), (1, oh - 1, ow - 1), (1, oh // 2, 0)]:
        row = got[(n * oh + oy) * ow + ox]
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                want = xp[n, :, oy * sh + i * dh, ox * sw + j * dw]
                np.testing.assert_array_equal(row[i, j], want)
    np.testing.assert_array_equal(codegen.build(fn).run(x=x), got)


def _out_size(shape, kernel, strides, padding, dilation) -> tuple[int, int]:
    from egraph_ir.op.nn import conv_geometry

    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=1)
    (_, _, oh, ow), *_ = conv_geometry(shape, (1, shape[1], *kernel), attrs)
    return oh, ow
