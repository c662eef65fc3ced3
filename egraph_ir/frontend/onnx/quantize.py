"""ONNX converters for linear quantisation, as compositions: QuantizeLinear (scale, round
half to even, shift, saturate, cast) and DequantizeLinear (shift, scale), per tensor, per
axis or per block; integer, 4-bit and float8 quantised types."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from ...types import FLOAT_DTYPES, NARROW_INTS, TensorType
from .node import Node, converter
from .windows import Window


def spread(n: Node, i: int, x: TensorType, axis: int | None = None) -> Expr:
    """Input i (a scale or zero point) shaped to broadcast against x: a scalar as is, a
    vector along `axis`, a blocked tensor repeated `block_size` times along `axis`."""
    value, t = n.x(i), n.type(i)
    axis = int(n.attr("axis", 1) if axis is None else axis) % max(x.ndim, 1)
    block = int(n.attr("block_size", 0))
    if t.size == 1 and block == 0:
        return op.reshape(value, ()) if t.ndim else value
    if block > 0:
        if t.ndim != x.ndim:
            raise FrontendError(f"a blocked scale has the input's rank, got {t} for {x}")
        index = Constant(np.arange(x.shape[axis], dtype=np.int64) // block)
        return op.take(value, index, axis=axis, mode="fast")
    if t.ndim != 1 or t.shape[0] != x.shape[axis]:
        raise FrontendError(f"a per-axis scale is 1-D of the axis' size {x.shape[axis]}, got {t}")
    shape = [1] * x.ndim
    shape[axis] = t.shape[0]
    if isinstance(value, Constant):  # reshaped here: a folded constant is what rules match
        return Constant(value.data.reshape(shape))
    return op.reshape(value, tuple(shape))


def dequantized_bias(
    n: Node, bias: int, scales: tuple[int, int], w_t: TensorType, axis: int
) -> Expr:
    """Input `bias` (int32) at scale x_scale * w_scale (inputs `scales`; w_scale per
    tensor or along the weight's `axis`) as the QDQ form writes it, which the quantize
    rules read: the float32 product a constant (per channel a vector), the zero point 0
    of the scale's shape."""
    x_t = n.type(scales[0])
    sx, sw = n.input(scales[0]), n.input(scales[1])
    per_channel = n.type(scales[1]).size > 1
    if isinstance(sx, Constant) and isinstance(sw, Constant):  # the rules' constant
        product = np.float32(sx.data.reshape(())) * sw.data.astype(np.float32)
        scale: Expr = Constant(product.reshape((-1,) if per_channel else ()))
    else:
        scale = op.multiply(
            op.cast(spread(n, scales[0], x_t), dtype="float32"),
            op.reshape(spread(n, scales[1], w_t, axis=axis), (-1,)),
        )
    zero = np.zeros((w_t.shape[axis],) if per_channel else (), "int32")
    return op.dequantize(n.x(bias), scale, Constant(zero))


def dequantized(n: Node, x: int, scale: int, zero: int, axis: int | None = None) -> Expr:
    """(input x - zero point) * scale, in float32, the product rounded by itself."""
    x_t = n.type(x)
    value = op.cast(n.x(x), dtype="float32")
    if n.input(zero) is not None:
        value = op.subtract(value, op.cast(spread(n, zero, x_t, axis), dtype="float32"))
    return op.rounded_product(value, op.cast(spread(n, scale, x_t, axis), dtype="float32"))


def quantized(
    n: Node, value: Expr, t: TensorType, scale: int, zero: int, out: str, axis: int | None = None
) -> Expr:
    """value / scale, rounded half to even (integers), plus the zero point, saturated to
    out's range (float8 / float4: unless saturate=0), cast to out."""
    scaled = op.divide(value, op.cast(spread(n, scale, t, axis), dtype="float32"))
    has_zero = n.input(zero) is not None
    if out in FLOAT_DTYPES:  # float8 / float4: the division, then a (saturating) cast
        if has_zero:
            scaled = op.add(scaled, op.cast(spread(n, zero, t, axis), dtype="float32"))
        if n.attr("saturate", 1) and out.startswith(("float8", "float4")):
            top = float(ml_dtypes.finfo(out).max)
            scaled = op.clip(scaled, a_min=-top, a_max=top)
        return op.cast(scaled, dtype=out)
    shifted = op.round(scaled)
    if has_zero:
        shifted = op.add(shifted, op.cast(spread(n, zero, t, axis), dtype="float32"))
    info = ml_dtypes.iinfo(out) if out in NARROW_INTS else np.iinfo(out)
    return op.cast(op.clip(shifted, a_min=float(info.min), a_max=float(info.max)), dtype=out)


def _onnx_dtype(n: Node, code: int) -> str:
    return str(n.importer.onnx.helper.tensor_dtype_to_np_dtype(code))


INTEGER_OPS = ("int8", "uint8", "int32")  # quantised types kept as the IR's (de)quantize


def zero_point(n: Node, zero: int, x: TensorType, dtype: str, axis: int | None = None) -> Expr:
    """Input `zero` shaped against x along `axis` (the node's, by default), or a zero of
    `dtype` when absent."""
    if n.input(zero) is None:
        return Constant(np.zeros((), dtype))
    return spread(n, zero, x, axis)


@converter("DequantizeLinear")
def _dequantize(n: Node) -> Expr:
    """The IR's dequantize for int8, uint8 and int32 with a float32 scale per tensor or
    per axis (quantised rules match it); other forms as arithmetic."""
    code = n.attr("output_dtype")
    out = _onnx_dtype(n, code) if code else n.type(1).dtype
    x = n.type(0)
    if x.dtype in INTEGER_OPS and out == "float32" and not n.attr("block_size", 0):
        zero = zero_point(n, 2, x, x.dtype)
        return op.dequantize(n.x(0), spread(n, 1, x), zero)
    return op.cast(dequantized(n, 0, 1, 2), dtype=out)


@converter("QuantizeLinear")
def _quantize(n: Node) -> Expr:
    code = n.attr("output_dtype")
    if code:
        out = _onnx_dtype(n, code)
    else:
        out = n.type(2).dtype if n.input(2) is not None else "uint8"
    x = n.type(0)
    plain = n.type(1).dtype == "float32" and not n.attr("block_size", 0)
    if out in ("int8", "uint8") and x.dtype == "float32" and plain:
        return op.quantize(n.x(0), spread(n, 1, x), zero_point(n, 2, x, out))
    return quantized(n, op.cast(n.x(0), dtype="float32"), n.type(0), 1, 2, out)


@converter("QLinearMatMul")
def _qlinear_matmul(n: Node) -> Expr:
    """quantize(dequantize(a) @ dequantize(b)): a's scale per row, b's and y's per column."""
    a_t, b_t = n.type(0), n.type(3)
    product = op.matmul(
        dequantized(n, 0, 1, 2, axis=a_t.ndim - 2), dequantized(n, 3, 4, 5, axis=-1)
    )
    out_t = TensorType((*a_t.shape[:-1], b_t.shape[-1]), "float32")
    return quantized(n, product, out_t, 6, 7, n.type(7).dtype, axis=-1)


@converter("MatMulInteger")
def _matmul_integer(n: Node) -> Expr:
    """(a - a_zero_point) @ (b - b_zero_point) in int32: the IR's qnn_matmul for scalar zero
    points; a's zero point per row, b's per column as arithmetic."""
    a_t, b_t = n.type(0), n.type(1)
    if all(n.input(i) is None or n.type(i).size == 1 for i in (2, 3)):  # the IR's qnn_matmul
        zeros = (zero_point(n, 2, a_t, a_t.dtype), zero_point(n, 3, b_t, b_t.dtype))
        return op.qnn_matmul(n.x(0), n.x(1), *zeros)

    def shifted(i: int, zero: int, axis: int, t: TensorType) -> Expr:
        value = op.cast(n.x(i), dtype="int32")
        if n.input(zero) is None:
            return value
        return op.subtract(value, op.cast(spread(n, zero, t, axis), dtype="int32"))

    return op.matmul(shifted(0, 2, a_t.ndim - 2, a_t), shifted(1, 3, -1, b_t))


def _window(n: Node, weights: int) -> Window:
    """The node's window: 2-D, or 1-D lifted to 2-D (Window's errors for the rest)."""
    return Window(n, n.type(weights).shape[2:])


def _convolved(n: Node, win: Window, x: Expr, w: Expr, integer: bool) -> Expr:
    """conv2d (or, integer, the int32 sums of x and w shifted by their zero points 2
    and 3: qnn_conv2d for scalar zero points, else exact float64) with the node's window."""
    attrs = {
        "strides": win.strides, "padding": win.pads, "dilation": win.dilations,
        "groups": int(n.attr("group", 1)),
    }  # fmt: skip
    if not integer:
        return op.conv2d(x, w, **attrs)
    x_t, w_t = n.type(0), n.type(1)
    if all(n.input(i) is None or n.type(i).size == 1 for i in (2, 3)):
        zeros = (zero_point(n, 2, x_t, x_t.dtype), zero_point(n, 3, w_t, w_t.dtype))
        return op.qnn_conv2d(x, w, *zeros, **attrs)

    def shifted(i: int, zero: int, t: TensorType) -> Expr:  # exact in float64
        value = op.cast(n.x(i), dtype="float64")
        if n.input(zero) is None:
            return value
        return op.subtract(value, op.cast(spread(n, zero, t, axis=0), dtype="float64"))

    product = op.conv2d(win.lift(shifted(0, 2, x_t)), win.lift(shifted(1, 3, w_t)), **attrs)
    return op.cast(product, dtype="int32")


@converter("ConvInteger")
def _conv_integer(n: Node) -> Expr:
    """The int32 sums of (x - x_zero_point) * (w - w_zero_point): the IR's qnn_conv2d
    (scalar zero points), which the int8 kernels compute."""
    win = _window(n, 1)
    return win.finish(_convolved(n, win, win.x, win.lift(n.x(1)), integer=True))


@converter("QLinearConv")
def _qlinear_conv(n: Node) -> Expr:
    """The QDQ chain QLinearConv stands for: the input and weights dequantized (weights
    per tensor or per output channel), the float convolution plus the int32 bias at scale
    input scale * weight scale (float32), quantized to y's scale and zero point. The
    quantisation rules turn it into qnn_conv2d + requantize, ONNX Runtime's arithmetic."""
    x_t, w_t = n.type(0), n.type(3)
    x = op.dequantize(n.x(0), spread(n, 1, x_t), zero_point(n, 2, x_t, x_t.dtype))
    w_zero = zero_point(n, 5, w_t, w_t.dtype, axis=0)  # per output channel, as the scale
    w = op.dequantize(n.x(3), spread(n, 4, w_t, axis=0), w_zero)
    win = _window(n, 3)
    out = _convolved(n, win, win.lift(x), win.lift(w), integer=False)
    if n.input(8) is not None:
        bias = dequantized_bias(n, 8, (1, 4), w_t, 0)
        out = op.bias_add(out, bias, axis=1)
    y_zero = n.type(7).dtype if n.input(7) is not None else "uint8"
    y = op.quantize(out, spread(n, 6, n.type()), zero_point(n, 7, n.type(), y_zero))
    return win.finish(y)
