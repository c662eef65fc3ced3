"""ONNX Runtime's QOperator contrib ops (com.microsoft: QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool,
QLinearConcat, QGemm) as the QDQ chains they stand for: dequantize the inputs, the float
op, quantize the result. The quantize rules then form the integer ops ONNX Runtime's
kernels compute (QLinearAdd, QLinearMul and QLinearSigmoid bit for bit:
rules/builtin/quantize.rules). QLinearSoftmax is ONNX Runtime's own table algorithm.
tests/egraph_ir/frontend/test_onnx_quantized.py measures each against ONNX Runtime."""

from __future__ import annotations

import math

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from ...types import TensorType
from .node import Node, converter
from .quantize import dequantized_bias, spread, zero_point
from .windows import Window


def _dequantized(n: Node, x: int, scale: int, zero: int) -> Expr:
    t = n.type(x)
    return op.dequantize(n.x(x), spread(n, scale, t), zero_point(n, zero, t, t.dtype))


def _quantized(n: Node, value: Expr, like: int, scale: int, zero: int) -> Expr:
    """value quantised to the scale and zero point of inputs `scale`, `zero` (the zero
    point's type, uint8 when absent), shaped like input `like`."""
    t = n.type(like)
    dtype = n.type(zero).dtype if n.input(zero) is not None else "uint8"
    return op.quantize(value, spread(n, scale, t), zero_point(n, zero, t, dtype))


@converter("com.microsoft.QLinearAdd", "com.microsoft.QLinearMul")
def _qlinear_binary(n: Node) -> Expr:
    """A, A_scale, A_zero, B, B_scale, B_zero, C_scale, C_zero."""
    a, b = _dequantized(n, 0, 1, 2), _dequantized(n, 3, 4, 5)
    value = op.add(a, b) if n.op_type == "QLinearAdd" else op.multiply(a, b)
    return _quantized(n, value, 0, 6, 7)


@converter("com.microsoft.QLinearSigmoid", "com.microsoft.QLinearLeakyRelu")
def _qlinear_unary(n: Node) -> Expr:
    """X, X_scale, X_zero, Y_scale, Y_zero."""
    x = _dequantized(n, 0, 1, 2)
    if n.op_type == "QLinearSigmoid":
        value = op.sigmoid(x)
    else:
        value = op.leaky_relu(x, alpha=float(n.attr("alpha", 0.01)))
    return _quantized(n, value, 0, 3, 4)


@converter("com.microsoft.QLinearGlobalAveragePool")
def _qlinear_global_average(n: Node) -> Expr:
    """The mean over the spatial axes (channels first, or last with channels_last=1)."""
    x = _dequantized(n, 0, 1, 2)
    rank = n.type(0).ndim
    axes = list(range(1, rank - 1)) if n.attr("channels_last", 0) else list(range(2, rank))
    return _quantized(n, op.mean(x, axis=axes, keepdims=True), 0, 3, 4)


@converter("com.microsoft.QLinearAveragePool")
def _qlinear_average_pool(n: Node) -> Expr:
    """X, X_scale, X_zero, Y_scale, Y_zero with AveragePool's attributes, channels first
    (ONNX Runtime's quantiser writes channels_last=0 for NCHW models)."""
    if n.attr("channels_last", 0):
        raise FrontendError(
            f"QLinearAveragePool {n.proto.name!r}: channels_last=1 (NHWC) is not supported; "
            "quantize the NCHW model"
        )
    win = Window(n)
    x = win.lift(_dequantized(n, 0, 1, 2))
    pooled = op.avg_pool2d(
        x, pool_size=win.kernel, strides=win.strides, padding=win.pads,
        dilation=win.dilations, ceil_mode=bool(n.attr("ceil_mode", 0)),
        count_include_pad=bool(n.attr("count_include_pad", 0)),
    )  # fmt: skip
    return _quantized(n, win.finish(pooled), 0, 3, 4)


@converter("com.microsoft.QLinearSoftmax")
def _qlinear_softmax(n: Node) -> Expr:
    """X, X_scale, X_zero, Y_scale, Y_zero; attributes axis and opset. Not the QDQ chain:
    ONNX Runtime's own table algorithm (qnn_softmax, egraph_ir/op/qnn.py), whose bits
    differ from it. Before opset 13 the row is everything from `axis` on."""
    t = n.type(0)
    opset = int(n.attr("opset", 13))
    axis = int(n.attr("axis", -1 if opset >= 13 else 1)) % t.ndim
    if n.const(1) is None or n.const(3) is None:
        raise FrontendError(
            f"QLinearSoftmax {n.proto.name!r}: X_scale and Y_scale must be constants"
        )
    row = t.shape[axis:] if opset < 13 else (t.shape[axis],)
    if not all(isinstance(d, int) for d in row):  # the table depends on the row's length
        raise FrontendError(
            f"QLinearSoftmax {n.proto.name!r}: rows of symbolic length {row}; pass shapes="
        )
    x = n.x(0)
    if opset < 13:  # one row: every axis from `axis` on
        x = op.reshape(x, newshape=(*t.shape[:axis], math.prod(row)))
    scalar = TensorType((), "float32")
    out = op.qnn_softmax(
        x, spread(n, 1, scalar), zero_point(n, 2, scalar, t.dtype),
        spread(n, 3, scalar), zero_point(n, 4, scalar, t.dtype), axis=axis,
    )  # fmt: skip
    return op.reshape(out, newshape=tuple(t.shape)) if opset < 13 else out


@converter("com.microsoft.QLinearConcat")
def _qlinear_concat(n: Node) -> Expr:
    """Y_scale, Y_zero, then (X, X_scale, X_zero) per input."""
    parts = [_dequantized(n, i, i + 1, i + 2) for i in range(2, len(n.proto.input), 3)]
    value = op.concatenate(*parts, axis=int(n.attr("axis")))
    return _quantized(n, value, 2, 0, 1)


@converter("com.microsoft.QGemm")
def _qgemm(n: Node) -> Expr:
    """alpha * A' B' + C, A and B dequantized (B per tensor or per output column: its axis
    0 with transB, else 1), C the int32 bias at scale a_scale * b_scale; quantized when
    y_scale is given, else float."""
    a_t, b_t = n.type(0), n.type(3)
    trans_a, trans_b = n.attr("transA", 0), n.attr("transB", 0)
    b_axis = 0 if trans_b else 1
    a = _dequantized(n, 0, 1, 2)
    b_zero = zero_point(n, 5, b_t, b_t.dtype, axis=b_axis)
    b = op.dequantize(n.x(3), spread(n, 4, b_t, axis=b_axis), b_zero)
    if trans_a:
        a = op.transpose(a, (1, 0))
    value = op.dense(a, b) if trans_b else op.matmul(a, b)
    alpha = float(n.attr("alpha", 1.0))
    if alpha != 1.0:
        value = op.multiply(value, Constant(np.array(alpha, "float32")))
    rows, columns = a_t.shape[1 if trans_a else 0], b_t.shape[0 if trans_b else 1]
    out = TensorType((rows, columns), "float32")
    if n.input(6) is not None:  # per column: a vector of products, zero points
        value = op.add(value, dequantized_bias(n, 6, (1, 4), b_t, b_axis))
    if n.input(7) is None:
        return value
    y_zero = n.type(8).dtype if n.input(8) is not None else "uint8"
    return op.quantize(value, spread(n, 7, out), zero_point(n, 8, out, y_zero))
