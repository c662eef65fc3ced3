"""Quantised tensors (TVM's qnn dialect, as plain ops): dequantize and quantize between
floats and integers, a convolution and a product over integers that accumulate in int32,
and requantize, which scales an int32 accumulator back to 8 bits.

Scales and zero points are tensors broadcast against the data (a scalar per tensor, or
shaped (1, C, 1, 1) per channel): the importer shapes them. The integer type of a
quantised result is its zero point's. The references are what ONNX Runtime computes:
QuantizeLinear divides by the scale and rounds half to even; its fused integer
convolution (QLinearConv) sums exact integer products plus the int32 bias, then
multiplies the float32 accumulator by (input scale * weight scale) / output scale in
float32 and rounds half to even (tests/egraph_ir/test_op_references.py checks them against
ONNX Runtime bit for bit). Rules in rules/builtin/quantize.rules form the integer ops
from dequantize -> conv2d -> quantize chains; passmgr's CanonicalizeQnn lowers whatever
remains to ordinary arithmetic before code generation.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, ShapeError, get_op, register_op
from ..types import NARROW_INTS, TensorType, Type
from ._common import broadcast_shapes, per_output_element, require_dtype, size_of
from .nn import CONV_ATTRS, conv2d_ref, conv_geometry, matmul_shape, windows

QUANTISED = ("int8", "uint8", "int32")


def integer_range(dtype: str) -> tuple[int, int]:
    info = ml_dtypes.iinfo(dtype) if dtype in NARROW_INTS else np.iinfo(dtype)
    return int(info.min), int(info.max)


def _scale_and_zero(args: list[TensorType], what: str) -> None:
    data, scale, zero = args
    require_dtype(scale, ("float32",), "scale")
    require_dtype(zero, QUANTISED, "zero point")
    if what == "dequantize" and zero.dtype != data.dtype:
        raise ShapeError(f"dequantize: zero point {zero.dtype} for {data.dtype} data")
    shape = broadcast_shapes(data.shape, scale.shape, zero.shape)
    if shape != data.shape:
        raise ShapeError(
            f"{what}: scale {scale.shape} and zero point {zero.shape} must broadcast to the "
            f"data's shape {data.shape}"
        )


def _dequantize_infer(args: list[TensorType], attrs: Attrs) -> Type:
    require_dtype(args[0], QUANTISED)
    _scale_and_zero(args, "dequantize")
    return TensorType(args[0].shape, "float32")


def dequantize_ref(x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """(x - zero point) * scale in float32."""
    shifted = x.astype(np.float32) - zero.astype(np.float32)
    return (shifted * scale.astype(np.float32)).astype(np.float32)


def _to_zero_point_type(allowed: tuple[str, ...], what: str):
    """The type relation of quantize and requantize: data of `allowed` dtypes, a result
    of the zero point's type."""

    def infer(args: list[TensorType], attrs: Attrs) -> Type:
        require_dtype(args[0], allowed)
        _scale_and_zero(args, what)
        return TensorType(args[0].shape, args[2].dtype)

    return infer


def _saturated(rounded: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """rounded + zero point, clipped to the zero point's type and cast to it. NaN is the
    type's least value, as ONNX Runtime's x86 kernels give it (the conversion's
    INT_MIN, saturated): int8 -128, uint8 0 (a scale of inf from a -inf attention mask
    makes NaNs of every quantized element)."""
    low, high = integer_range(str(zero.dtype))
    with np.errstate(all="ignore"):
        shifted = rounded + zero.astype(np.float32)
    return np.nan_to_num(np.clip(shifted, low, high), nan=float(low)).astype(zero.dtype)


def quantize_ref(x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """x / scale rounded half to even, plus the zero point, saturated to its type."""
    with np.errstate(all="ignore"):
        return _saturated(np.rint(x.astype(np.float32) / scale.astype(np.float32)), zero)


def requantize_ref(acc: np.ndarray, multiplier: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """float32(acc) * multiplier rounded half to even, plus the zero point, saturated."""
    with np.errstate(all="ignore"):
        return _saturated(np.rint(acc.astype(np.float32) * multiplier.astype(np.float32)), zero)


def _zero_point_of(t: TensorType, zero: TensorType, what: str) -> None:
    require_dtype(t, ("int8", "uint8"), what)
    require_dtype(zero, (t.dtype,), f"{what}'s zero point")
    if broadcast_shapes(t.shape, zero.shape) != t.shape:
        raise ShapeError(f"{what}'s zero point {zero.shape} must broadcast to {t.shape}")


def _qnn_conv2d_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, weight, data_zero, weight_zero = args
    _zero_point_of(data, data_zero, "data")
    _zero_point_of(weight, weight_zero, "weight")
    as_floats = [TensorType(data.shape, "float32"), TensorType(weight.shape, "float32")]
    out = get_op("conv2d").infer(as_floats, attrs)  # conv2d's shape rules and errors
    assert isinstance(out, TensorType)
    return TensorType(out.shape, "int32")


def _shifted(x: np.ndarray, zero: np.ndarray) -> np.ndarray:
    return x.astype(np.int64) - zero.astype(np.int64)


# How byte products are summed: "exact" (int32), or "saturating" as ONNX Runtime's x86
# uint8 x int8 kernels sum them on CPUs without VNNI (vpmaddubsw): the raw bytes' products
# added in pairs of consecutive k, each pair saturated to int16, the pairs added in int32,
# then the zero points' shares taken off exactly. k runs as MLAS lays it out: a product's
# depth; a convolution's (kernel row, column, input channel), its NHWC im2col order.
PAIRS = AttrSpec("pairs", "str", "exact", ("exact", "saturating"))
_CHUNK = 1 << 22  # products held at once by pair_sums


def pair_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum_k a[..., m, k] * b[..., n, k] of raw bytes in saturating int16 pairs, (..., M, N)
    int64; rows in chunks, so the (M, N, K) products never all exist at once."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    if a.shape[-1] % 2:
        a, b = (np.concatenate([t, np.zeros((*t.shape[:-1], 1), np.int64)], -1) for t in (a, b))
    rows = max(1, _CHUNK // max(1, b.shape[-2] * b.shape[-1]))
    parts = []
    for m in range(0, a.shape[-2], rows):
        products = a[..., m : m + rows, None, :] * b[..., None, :, :]
        pairs = products[..., 0::2] + products[..., 1::2]
        parts.append(np.clip(pairs, -(2**15), 2**15 - 1).sum(-1))
    return np.concatenate(parts, axis=-2) if parts else np.zeros((*a.shape[:-1], b.shape[-2]))


def _saturating(cols: np.ndarray, w: np.ndarray, x_zero: Any, w_zero: np.ndarray) -> np.ndarray:
    """MLAS's sum of (cols - x_zero) * (w - w_zero) over k: the raw bytes in saturating
    pairs, less x_zero * sum(w) and w_zero * sum(cols), plus K * x_zero * w_zero; w is
    (N, K), w_zero per row of it."""
    if np.size(x_zero) != 1:
        raise ShapeError("saturating pairs take one data zero point per tensor")
    zx, zw, depth = int(np.ravel(x_zero)[0]), w_zero.astype(np.int64), cols.shape[-1]
    raw = pair_sums(cols, w)
    col_sums = cols.astype(np.int64).sum(-1)[..., None]
    return raw - zx * w.astype(np.int64).sum(-1) - zw * col_sums + depth * zx * zw


def qnn_conv2d_ref(x, w, x_zero, w_zero, strides, padding, dilation, groups, pairs="exact"):
    """conv2d of (x - x_zero) and (w - w_zero) as int32: summed exactly, or in saturating
    pairs over MLAS's (kernel row, column, channel) order, the padding x_zero's bytes."""
    if pairs == "exact":
        out = conv2d_ref(
            _shifted(x, x_zero), _shifted(w, w_zero), strides, padding, dilation, groups
        )
        return out.astype(np.int32)
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    (n, o, oh, ow), (pt, pl, pb, pr), (sh, sw), (dh, dw) = conv_geometry(x.shape, w.shape, attrs)
    fill = int(np.ravel(x_zero)[0]) if np.size(x_zero) == 1 else 0
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    zw = np.broadcast_to(w_zero, w.shape).reshape(o, -1)[:, 0]
    cg, og = x.shape[1] // groups, o // groups
    outs = []
    for g in range(groups):
        win = windows(xp[:, g * cg : (g + 1) * cg], w.shape[2], w.shape[3], sh, sw, dh, dw, oh, ow)
        cols = win.transpose(0, 2, 3, 4, 5, 1).reshape(n, oh * ow, -1)  # (tap, channel)
        wg = w[g * og : (g + 1) * og].transpose(0, 2, 3, 1).reshape(og, -1)
        summed = _saturating(cols, wg, x_zero, zw[g * og : (g + 1) * og])
        outs.append(summed.reshape(n, oh, ow, og).transpose(0, 3, 1, 2))
    return np.concatenate(outs, axis=1).astype(np.int32)


def _qnn_dense_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, weight, data_zero, weight_zero = args
    _zero_point_of(data, data_zero, "data")
    _zero_point_of(weight, weight_zero, "weight")
    if data.ndim != 2 or weight.ndim != 2 or data.shape[1] != weight.shape[1]:
        raise ShapeError(f"qnn_dense needs (M, K) data and (N, K) weight, got {data} and {weight}")
    return TensorType((data.shape[0], weight.shape[0]), "int32")


def qnn_dense_ref(x, w, x_zero, w_zero, pairs="exact") -> np.ndarray:
    """(x - x_zero) @ (w - w_zero).T as int32: exact, or in saturating pairs of k."""
    if pairs == "exact":
        return (_shifted(x, x_zero) @ _shifted(w, w_zero).T).astype(np.int32)
    zw = np.broadcast_to(w_zero, w.shape)[:, 0]
    return _saturating(x, w, x_zero, zw).astype(np.int32)


def _scalar_scales(
    op_name: str, dtype: str, pairs: dict[str, tuple[TensorType, TensorType]]
) -> None:
    """Each named (scale, zero point) pair: a float32 scalar and a scalar of dtype."""
    for what, (scale, zero) in pairs.items():
        require_dtype(scale, ("float32",), f"{what} scale")
        require_dtype(zero, (dtype,), f"{what} zero point")
        if scale.shape != () or zero.shape != ():
            raise ShapeError(f"{op_name} takes scalar scales and zero points ({what})")


def _qnn_add_infer(args: list[TensorType], attrs: Attrs) -> Type:
    lhs, rhs = args[0], args[1]
    require_dtype(lhs, ("int8", "uint8"), "lhs")
    if rhs.dtype != lhs.dtype or rhs.shape != lhs.shape:
        raise ShapeError(f"qnn_add needs two {lhs} tensors, got {rhs}")
    pairs = {"lhs": (args[2], args[3]), "rhs": (args[4], args[5]), "output": (args[6], args[7])}
    _scalar_scales("qnn_add", lhs.dtype, pairs)
    return TensorType(lhs.shape, lhs.dtype)


def fma32(x: Any, y: Any, z: Any) -> np.ndarray:
    """x * y + z rounded once to float32 (the product of two float32 is exact in float64)."""
    wide = np.asarray(x, np.float64) * np.asarray(y, np.float64) + np.asarray(z, np.float64)
    return wide.astype(np.float32)


def qnn_add_parts(sa: Any, za: Any, sb: Any, zb: Any, sc: Any, zc: Any) -> tuple[Any, Any, Any]:
    """ONNX Runtime's QLinearAdd constants: the ratios sa/sc and sb/sc in float32 and the
    offset zc - (ratio_a * za + ratio_b * zb), whose inner sum is a fused multiply-add."""
    ra = np.float32(sa) / np.float32(sc)
    rb = np.float32(sb) / np.float32(sc)
    offset = np.float32(zc) - fma32(ra, np.float32(za), np.float32(rb * np.float32(zb)))
    return ra, rb, offset


def qnn_add_ref(a, b, sa, za, sb, zb, sc, zc) -> np.ndarray:
    """The sum of two quantised tensors requantised: round(a * ra + (b * rb + offset)) with
    both steps fused multiply-adds (ONNX Runtime's AVX2 QLinearAdd), saturated."""
    ra, rb, offset = qnn_add_parts(sa, za, sb, zb, sc, zc)
    value = fma32(a.astype(np.float32), ra, fma32(b.astype(np.float32), rb, offset))
    low, high = integer_range(str(a.dtype))
    return np.clip(np.rint(value), low, high).astype(a.dtype)


def _qnn_sigmoid_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, scale, zero, out_scale, out_zero = args
    require_dtype(data, ("int8", "uint8"))
    pairs = {"input": (scale, zero), "output": (out_scale, out_zero)}
    _scalar_scales("qnn_sigmoid", data.dtype, pairs)
    return TensorType(data.shape, data.dtype)


# ONNX Runtime's logistic (MLAS, after Eigen): a rational function of x over [-18, 18]
LOGISTIC_ALPHA = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                  8.51377133304701e-03, 2.48287947061529e-01)  # fmt: skip
LOGISTIC_BETA = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                 1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)  # fmt: skip


def logistic_mlas(x: np.ndarray) -> np.ndarray:
    """The sigmoid ONNX Runtime's CPU kernels compute (fused multiply-adds, as its FMA3
    kernel evaluates the polynomials), to the float32 bit."""
    v = np.clip(x.astype(np.float32), np.float32(-18.0), np.float32(18.0))
    v2 = v * v
    p = np.full_like(v, np.float32(LOGISTIC_ALPHA[0]))
    for a in LOGISTIC_ALPHA[1:]:
        p = fma32(p, v2, np.float32(a))
    p = p * v
    q = np.full_like(v, np.float32(LOGISTIC_BETA[0]))
    for b in LOGISTIC_BETA[1:]:
        q = fma32(q, v2, np.float32(b))
    return np.clip(p / q + np.float32(0.5), np.float32(0.0), np.float32(1.0))


def sigmoid_table(dtype: str, sx: Any, zx: Any, sy: Any, zy: Any) -> np.ndarray:
    """QLinearSigmoid's lookup table: every value of the 8-bit type dequantized, through
    logistic_mlas, quantized; index = value - the type's minimum."""
    low, high = integer_range(dtype)
    values = np.arange(low, high + 1, dtype=np.int64)
    x = np.float32(sx) * (values - int(zx)).astype(np.float32)
    return quantize_ref(logistic_mlas(x), np.asarray(sy, np.float32), np.asarray(zy, dtype))


def qnn_sigmoid_ref(x, sx, zx, sy, zy) -> np.ndarray:
    """ONNX Runtime's QLinearSigmoid: a table lookup (sigmoid_table)."""
    table = sigmoid_table(str(x.dtype), sx, zx, sy, zy)
    return table[x.astype(np.int64) - integer_range(str(x.dtype))[0]]


def _qnn_softmax_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, scale, zero, out_scale, out_zero = args
    require_dtype(data, ("int8", "uint8"))
    pairs = {"input": (scale, zero), "output": (out_scale, out_zero)}
    _scalar_scales("qnn_softmax", data.dtype, pairs)
    axis = int(attrs["axis"])
    if not -len(data.shape) <= axis < len(data.shape):
        raise ShapeError(f"qnn_softmax: axis {axis} out of range for shape {data.shape}")
    return TensorType(data.shape, data.dtype)


def softmax_table(x_scale: float, length: int, y_scale: float) -> np.ndarray:
    """QLinearSoftmax's table: exp((i - 255 + shift) * x_scale) in double, stored as float,
    where shift * x_scale = log(FLT_MAX / length) - 5 (at least 0) keeps a row's sum of
    `length` entries finite. Where an entry times floor(1 / y_scale) would overflow
    (rows of a few elements), ONNX Runtime's result is undefined (its quotient is inf);
    this table is then scaled by 2**-16, which changes no quotient but the overflowing."""
    largest = np.float32(np.finfo(np.float32).max) / np.float32(length)
    shift = max(0.0, math.log(float(largest)) - 5.0) / x_scale
    values = [math.exp((i - 255 + shift) * x_scale) for i in range(256)]
    table = np.asarray(values, dtype=np.float64).astype(np.float32)
    if float(table.max()) * float(softmax_inverse(y_scale)) > float(np.finfo(np.float32).max):
        table = table * np.float32(2.0**-16)
    return table


def softmax_inverse(y_scale: float) -> np.float32:
    """QLinearSoftmax's output multiplier: floor(1 / y_scale) in float32."""
    return np.floor(np.float32(1.0) / np.float32(y_scale))


def qnn_softmax_ref(x, sx, zx, sy, zy, axis=-1) -> np.ndarray:
    """ONNX Runtime's QLinearSoftmax, not the float chain: each exponential read from the
    table (softmax_table) at 255 - (row max - x), the row summed in order in float32,
    the output round(e * floor(1 / sy) / sum) + zy, capped at the type's top (the
    quotient is never negative). zx cancels out."""
    table = softmax_table(float(sx), int(x.shape[axis]), float(sy))
    values = x.astype(np.int64)
    e = table[values + 255 - values.max(axis=axis, keepdims=True)]
    total = np.take(np.cumsum(e, axis=axis, dtype=np.float32), [-1], axis=axis)
    q = np.rint((e * softmax_inverse(float(sy))) / total).astype(np.int64) + int(zy)
    return np.minimum(q, integer_range(str(x.dtype))[1]).astype(x.dtype)


def _qnn_matmul_infer(args: list[TensorType], attrs: Attrs) -> Type:
    a, b, a_zero, b_zero = args
    _zero_point_of(a, a_zero, "a")
    _zero_point_of(b, b_zero, "b")
    return TensorType(matmul_shape(a.shape, b.shape), "int32")


def qnn_matmul_ref(a, b, a_zero, b_zero, pairs="exact") -> np.ndarray:
    """ONNX's MatMulInteger: (a - a_zero) @ (b - b_zero) as int32, exact or in saturating
    pairs of k (one zero point for b, or one per column)."""
    if pairs == "exact":
        return np.matmul(_shifted(a, a_zero), _shifted(b, b_zero)).astype(np.int32)
    zb = np.broadcast_to(b_zero, b.shape)[..., 0, :]
    return _saturating(a, np.swapaxes(b, -1, -2), a_zero, zb[..., None, :]).astype(np.int32)


def _matmul_macs(args: list[TensorType], out: Type, attrs: Attrs) -> float:
    assert isinstance(out, TensorType)
    return 2.0 * max(size_of(out.shape), 1) * args[0].shape[-1]


def _macs(args: list[TensorType], out: Type, attrs: Attrs) -> float:
    assert isinstance(out, TensorType)
    return 2.0 * size_of(out.shape) * size_of(args[1].shape[1:])


for name, infer, ref, doc in (
    ("dequantize", _dequantize_infer, dequantize_ref, "(data - zero_point) * scale, float32"),
    (
        "quantize",
        _to_zero_point_type(("float32",), "quantize"),
        quantize_ref,
        "round(data / scale) + zero_point, saturated",
    ),
    (
        "requantize",
        _to_zero_point_type(("int32",), "requantize"),
        requantize_ref,
        "round(float32(data) * scale) + zero_point, saturated: an int32 accumulator to 8 bits",
    ),
):
    register_op(
        Op(
            name=name,
            inputs=("data", "scale", "zero_point"),
            infer=infer,
            reference=ref,
            pattern=OpPattern.BROADCAST,
            flops=per_output_element(3.0),
            doc=doc,
            foldable=name != "dequantize",  # a weight stays integer for the rules to read
        )
    )
INTEGER_PAIR = ("data", "weight", "data_zero_point", "weight_zero_point")
FUSABLE, ELEMWISE = OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.ELEMWISE
INTEGER_OPS: tuple[tuple[Any, ...], ...] = (
    ("qnn_conv2d", INTEGER_PAIR, _qnn_conv2d_infer, qnn_conv2d_ref, FUSABLE, _macs,
     (*CONV_ATTRS, PAIRS),
     "conv2d of int8/uint8 data and weight less their zero points, int32 (pairs: how summed)"),
    ("qnn_dense", INTEGER_PAIR, _qnn_dense_infer, qnn_dense_ref, FUSABLE, _macs, (PAIRS,),
     "dense of int8/uint8 data and weight less their zero points, int32 (pairs: how summed)"),
    ("qnn_matmul", ("a", "b", "a_zero_point", "b_zero_point"), _qnn_matmul_infer,
     qnn_matmul_ref, FUSABLE, _matmul_macs, (PAIRS,),
     "matmul of int8/uint8 tensors less their zero points, int32 (MatMulInteger; pairs)"),
    ("qnn_add", ("lhs", "rhs", "lhs_scale", "lhs_zero_point", "rhs_scale", "rhs_zero_point",
                 "output_scale", "output_zero_point"), _qnn_add_infer, qnn_add_ref, ELEMWISE,
     per_output_element(4.0), (),
     "quantised lhs + rhs requantised to the output's scale and zero point"),
    ("qnn_sigmoid", ("data", "scale", "zero_point", "output_scale", "output_zero_point"),
     _qnn_sigmoid_infer, qnn_sigmoid_ref, ELEMWISE, per_output_element(1.0), (),
     "sigmoid of a quantised tensor requantised, by a 256-entry table"),
    ("qnn_softmax", ("data", "scale", "zero_point", "output_scale", "output_zero_point"),
     _qnn_softmax_infer, qnn_softmax_ref, OpPattern.OPAQUE, per_output_element(4.0),
     (AttrSpec("axis", "int", -1),),
     "softmax of a quantised tensor along axis, quantised (ONNX Runtime's table algorithm)"),
)  # fmt: skip
for op_name, inputs, relation, reference, pattern, flops, attrs, text in INTEGER_OPS:
    register_op(Op(op_name, inputs, relation, reference, pattern, flops, attrs, doc=text))
