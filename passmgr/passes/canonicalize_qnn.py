"""CanonicalizeQnn: the quantised ops (egraph_ir/op/qnn.py) as ordinary arithmetic, which
the code generator compiles (TVM's qnn CanonicalizeOps). FakeQuantizationToInteger runs
first, while the e-graph can still see dequantize -> op -> quantize chains.

- dequantize: (float32(x) - float32(zero point)) * scale; - quantize: clip(round(x / scale) + zero
point) in the zero point's type; - requantize: clip(round(float32(acc) * multiplier) + zero point);
- qnn_conv2d / qnn_dense: the float convolution or product of the shifted integers, as int32: in
float32 when the weights bound every partial sum below 2**24 (then each sum is exact in any order),
else float32 convolutions over slices of input channels summed in float64, else float64 (exact up to
2**53). Either way this is the int32 result; FoldConstant then turns the shifted weights into float
constants. Under a requantize the accumulator stays in floats, so the whole epilogue fuses into the
conv kernel; - qnn_matmul (MatMulInteger): a float32 matmul when a constant b bounds every partial
sum below 2**24, else float64; - qnn_add: QLinearAdd's two fused multiply-adds, each as a float64
sum rounded once; - qnn_sigmoid: a gather from its 256-entry table, computed here;
- qnn_softmax: QLinearSoftmax's table algorithm. A qnn_conv2d,
qnn_matmul or qnn_dense the host code generator computes natively (its int8 kernels: u8 x s8 words
accumulated by VNNI's vpdpbusd, codegen/lower/kernels/conv/int8.py and
codegen/lower/kernels/gemm/int8.py, declared through egraph_ir.support.register_native_form) stays
as it is, and so does the int32 chain under its requantize, which fuses into the kernel's epilogue;
so does a requantize of such an int32 sum where the code generator has an integer form of it
(codegen/lower/compute/qnn.py: a constant multiplier of at most 1/4). The config key
`qnn.integer_kernels` (default on) turns all of that off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from egraph_ir import op
from egraph_ir.dims import Dim
from egraph_ir.expr import Call, Constant, Expr, Function
from egraph_ir.frontend import from_onnx
from egraph_ir.module import IRModule
from egraph_ir.op.qnn import integer_range, sigmoid_table, softmax_inverse, softmax_table
from egraph_ir.registry import Op
from egraph_ir.support import has_native_form
from egraph_ir.types import TensorType
from egraph_ir.visitor import rewrite_calls

from ..config import register_config
from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record

register_config(
    "onnx.onnxruntime_float_groups",
    bool,
    True,
    "importing ONNX (codegen.build, egc): quantised groups ONNX Runtime's x86 build runs in "
    "float stay float, summed in its order (its bits); false: integer ops for every group",
)


def import_onnx(model: Any, shapes: dict[str, tuple[int, ...]] | None = None) -> IRModule:
    """from_onnx with the current PassContext's onnx.onnxruntime_float_groups (what
    codegen.build and egc import a model with)."""
    groups = bool(PassContext.current().get_config("onnx.onnxruntime_float_groups"))
    return from_onnx(model, shapes or None, onnxruntime_float_groups=groups)


register_config(
    "qnn.integer_kernels",
    bool,
    True,
    "keep quantised calls the code generator computes as integers (int8 convolutions and "
    "products) instead of lowering them to float arithmetic",
)

QNN_OPS = (
    "dequantize", "quantize", "requantize", "qnn_conv2d", "qnn_dense", "qnn_matmul", "qnn_add",
    "qnn_sigmoid", "qnn_softmax",
)  # fmt: skip


def _f32(e: Expr) -> Expr:
    return op.cast(e, dtype="float32")


def _clipped(value: Expr, dtype: str) -> Expr:
    """value clipped to an integer type's range and cast to it; NaN the least value, as
    ONNX Runtime's kernels give it (egraph_ir/op/qnn.py: _saturated)."""
    low, high = integer_range(dtype)
    clipped = op.clip(value, a_min=float(low), a_max=float(high))
    if low != 0:  # a cast gives NaN 0 (uint8's least value)
        least = Constant(np.array(low, np.float32))
        clipped = op.where(op.not_equal(value, value), least, clipped)
    return op.cast(clipped, dtype=dtype)


def _saturated(value: Expr, zero: Expr, dtype: str) -> Expr:
    """value + zero point, clipped to the zero point's type (dtype) and cast to it."""
    return _clipped(op.add(value, _f32(zero)), dtype)


def _dequantized(x: Expr, scale: Expr, zero: Expr) -> Expr:
    """(x - zero) * scale, the product rounded by itself (as ONNX Runtime writes it)."""
    return op.rounded_product(op.subtract(_f32(x), _f32(zero)), scale)


def _quantized(value: Expr, scale: Expr, zero: Expr, dtype: str) -> Expr:
    return _saturated(op.round(op.divide(value, scale)), zero, dtype)


def _shifted(x: Expr, zero: Expr, dtype: str) -> Expr:
    return op.subtract(op.cast(x, dtype=dtype), op.cast(zero, dtype=dtype))


Lookup = Callable[[Expr], Expr]  # an original expression -> its lowered form


def lowered(call: Call, args: list[Expr], lookup: Lookup) -> Expr:
    """One quantised call (typed) as arithmetic over its (already lowered) arguments."""
    name = call.op.name  # type: ignore[union-attr]
    if name == "requantize":
        return _requantized(call, args, lookup)
    if _stays(call):
        return Call(call.op, tuple(args), call.attrs)
    dtype = call.checked_type.dtype  # type: ignore[attr-defined]
    if name == "dequantize":
        x, scale, zero = args
        return _dequantized(x, scale, zero)
    if name == "quantize":
        x, scale, zero = args
        return _quantized(x, scale, zero, dtype)
    if name == "qnn_conv2d":
        value, _ = _conv_in_floats(call, lookup, FLOAT32_INTEGERS)
        return op.cast(value, dtype="int32")
    if name == "qnn_add":
        return _qnn_add(args, dtype)
    if name == "qnn_sigmoid":
        return _qnn_sigmoid(call, args, dtype)
    if name == "qnn_softmax":
        return _qnn_softmax(call, args, dtype)
    x, w, x_zero, w_zero = args  # qnn_matmul (b is (K, N)) or qnn_dense (weight is (N, K))
    summed = -2 if name == "qnn_matmul" else -1
    wide = "float32" if _exact_in_float32(call, summed) else "float64"
    product = op.matmul if name == "qnn_matmul" else op.dense
    return op.cast(product(_shifted(x, x_zero, wide), _shifted(w, w_zero, wide)), dtype="int32")


def _requantized(call: Call, args: list[Expr], lookup: Lookup) -> Expr:
    """requantize over the float value of a convolution lowered to floats; kept for the
    code generator's integer epilogue where it has one and the sum stays int32; else the
    float arithmetic."""
    acc, multiplier, zero = args
    value = _float_accumulator(call.args[0], lookup)
    if value is None and integer_kernel_keeps(call):
        return Call(call.op, tuple(args), call.attrs)
    value = _f32(acc) if value is None else value
    # float32(acc) * multiplier rounded by itself, as ORT's requantize: a plain multiply
    # was folded into a float convolution's weights by FoldScaleAxis (per channel), which
    # moved MobileNetV2's per-channel depthwise results by a quantum
    scaled = op.rounded_product(value, multiplier)
    return _saturated(op.round(scaled), zero, call.checked_type.dtype)  # type: ignore[attr-defined]


def _stays(call: Call) -> bool:
    """A quantised call left as it is: for an integer kernel, or summing in saturating
    pairs (OnnxRuntimeSums: the integer kernels and the op's reference compute those; they
    have no float form)."""
    return integer_kernel_keeps(call) or call.attrs.get("pairs") == "saturating"


def integer_kernel_keeps(call: Call) -> bool:
    """Whether a (typed) quantised call is left for the code generator's integer kernel."""
    return bool(PassContext.current().get_config("qnn.integer_kernels")) and has_native_form(call)


FLOAT32_INTEGERS = 2**24  # every integer below this is a float32


def _fma(x: Expr, y: Expr, z: Expr) -> Expr:
    """x * y + z rounded once to float32: the float32 product is exact in float64."""
    wide = op.add(
        op.multiply(op.cast(x, dtype="float64"), op.cast(y, dtype="float64")),
        op.cast(z, dtype="float64"),
    )
    return op.cast(wide, dtype="float32")


def _qnn_sigmoid(call: Call, args: list[Expr], dtype: str) -> Expr:
    """A gather from the 256-entry table the constant scales give (the float chain when
    they are not constants)."""
    x, *params = args
    if not all(isinstance(p, Constant) for p in params):
        sx, zx, sy, zy = params
        return _quantized(op.sigmoid(_dequantized(x, sx, zx)), sy, zy, dtype)
    table = sigmoid_table(dtype, *(p.data for p in params))  # type: ignore[attr-defined]
    index = op.subtract(
        op.cast(x, dtype="int32"), Constant(np.array(integer_range(dtype)[0], "int32"))
    )
    # int32 entries: a vector of 32-bit lanes gathers in one instruction (vpgatherdd),
    # where byte entries were gathered a lane at a time
    words = Constant(table.astype(np.int32))
    return op.cast(op.take(words, index, axis=0, mode="fast"), dtype=dtype)


def _qnn_softmax(call: Call, args: list[Expr], dtype: str) -> Expr:
    """QLinearSoftmax's algorithm (egraph_ir/op/qnn.py: qnn_softmax_ref) with the table
    the constant input scale and the row's length give (a symbolic length, a KV cache's:
    the table computed when the program runs, as ONNX Runtime does); the float chain, a
    quantum apart, when the scales are run-time values. The code generator sums rows under
    256 elements in order, as ONNX Runtime does; longer ones in lanes, which can move a
    quotient within a rounding of .5 by one."""
    x, sx, zx, sy, zy = args
    axis = int(call.attrs["axis"])
    length = call.args[0].checked_type.shape[axis]  # type: ignore[attr-defined]
    if not all(isinstance(a, Constant) for a in (sx, sy, zy)):
        return _quantized(op.softmax(_dequantized(x, sx, zx), axis=axis), sy, zy, dtype)
    assert isinstance(sx, Constant) and isinstance(sy, Constant)
    if isinstance(length, int):
        table: Expr = Constant(softmax_table(float(sx.data), length, float(sy.data)))
    else:
        table = _run_time_softmax_table(length, float(sx.data), float(sy.data))
    values = op.cast(x, dtype="int32")
    top = op.max(values, axis=axis, keepdims=True)
    index = op.subtract(op.add(values, Constant(np.array(255, "int32"))), top)
    e = op.take(table, index, axis=0)
    scaled = op.multiply(e, Constant(np.asarray(softmax_inverse(float(sy.data)), "float32")))
    q = op.round(op.divide(scaled, op.sum(e, axis=axis, keepdims=True)))
    level = op.add(op.cast(q, dtype="int32"), op.cast(zy, dtype="int32"))
    top_level = Constant(np.array(integer_range(dtype)[1], "int32"))
    return op.cast(op.minimum(level, top_level), dtype=dtype)


def _run_time_softmax_table(length: Dim, x_scale: float, y_scale: float) -> Expr:
    """softmax_table's arithmetic over a row length known only when the program runs:
    the float32 quotient FLT_MAX / length, its log and the 256 exponentials in float64
    (libm's, as ONNX Runtime's), stored as float32, scaled by 2**-16 where the largest
    entry times floor(1 / y_scale) would overflow."""

    def f64(value: float) -> Constant:
        return Constant(np.array(value, np.float64))

    top = float(np.finfo(np.float32).max)
    n = op.cast(op.dim_values(values=(length,), shape=(), dtype="int64"), dtype="float32")
    largest = op.cast(op.divide(Constant(np.array(top, np.float32)), n), dtype="float64")
    shift = op.divide(op.maximum(op.subtract(op.log(largest), f64(5.0)), f64(0.0)), f64(x_scale))
    steps = Constant(np.arange(256, dtype=np.float64) - 255.0)
    table = op.cast(op.exp(op.multiply(op.add(steps, shift), f64(x_scale))), dtype="float32")
    widest = op.multiply(
        op.cast(op.max(table), dtype="float64"), f64(float(softmax_inverse(y_scale)))
    )
    scale = op.where(op.greater(widest, f64(top)), Constant(np.array(2.0**-16, np.float32)), 1.0)
    return op.multiply(table, scale)


def _qnn_add(args: list[Expr], dtype: str) -> Expr:
    """qnn_add as ONNX Runtime's QLinearAdd computes it (egraph_ir/op/qnn.py: qnn_add_ref);
    the ratios and the offset fold to constants."""
    a, b, sa, za, sb, zb, sc, zc = args
    ra, rb = op.divide(sa, sc), op.divide(sb, sc)
    offset = op.subtract(_f32(zc), _fma(ra, _f32(za), op.multiply(rb, _f32(zb))))
    return _clipped(op.round(_fma(_f32(a), ra, _fma(_f32(b), rb, offset))), dtype)


def _float_accumulator(acc: Expr, lookup: Lookup) -> Expr | None:
    """float32(acc) for requantize's argument computed in floats without passing through
    int32 (the epilogue then fuses into the convolution's kernel): a qnn_conv2d, or one
    plus a constant int32 bias; None for anything else."""
    conv: Expr = acc
    bias: Constant | None = None
    if isinstance(acc, Call) and isinstance(acc.op, Op) and acc.op.name == "bias_add":
        conv, added = acc.args
        if not isinstance(added, Constant) or acc.attrs["axis"] != 1:
            return None
        bias = added
    if not (isinstance(conv, Call) and isinstance(conv.op, Op) and conv.op.name == "qnn_conv2d"):
        return None
    if _stays(conv):
        return None
    room = FLOAT32_INTEGERS - (0 if bias is None else int(np.abs(bias.data).max(initial=0)))
    value, dtype = _conv_in_floats(conv, lookup, room)
    if bias is not None:
        value = op.bias_add(value, op.cast(bias, dtype=dtype), axis=1)
    return value if dtype == "float32" else _f32(value)  # rounds as float(int32) does


def _conv_in_floats(conv: Call, lookup: Lookup, room: int) -> tuple[Expr, str]:
    """The exact int32 accumulation of a qnn_conv2d as a float tensor, and its dtype:
    float32 when every partial sum is an integer below `room` (<= 2**24: exact in any
    order); else float32 convolutions over slices of the input channels that each are,
    summed in float64; else one float64 convolution (exact up to 2**53)."""
    x, w, x_zero, w_zero = (lookup(a) for a in conv.args)

    def convolved(data: Expr, weight: Expr, dtype: str) -> Expr:
        attrs = {k: v for k, v in conv.attrs.items() if k != "pairs"}  # exact sums here
        return op.conv2d(_shifted(data, x_zero, dtype), _shifted(weight, w_zero, dtype), **attrs)

    slices = _channel_slices(conv, room)
    if len(slices) == 1:
        return convolved(x, w, "float32"), "float32"
    if not slices or int(conv.attrs["groups"]) != 1:
        return convolved(x, w, "float64"), "float64"
    assert isinstance(w, Constant)
    total: Expr | None = None
    for start, end in slices:
        part_x = op.strided_slice(x, begin=(start,), end=(end,), axes=(1,))
        part_w = Constant(np.ascontiguousarray(w.data[:, start:end]))
        part = op.cast(convolved(part_x, part_w, "float32"), dtype="float64")
        total = part if total is None else op.add(total, part)
    assert total is not None
    return total, "float64"


def _exact_in_float32(call: Call, summed: int) -> bool:
    """Whether every partial sum of a qnn_dense or qnn_matmul stays an integer below 2**24:
    a constant weight whose largest sum of |w - zero point| along the reduced axis
    `summed`, times 255 (the largest |x - zero point| of 8-bit data), does; so does an
    8-bit operand known only at run time (attention's QK^T and PV) whose depth times its
    largest |b - zero point| (by the zero point and the type's range) times 255 does
    (ViT-tiny's: 64 and 197 deep, 1.1 and 6.6 million)."""
    w, w_zero = call.args[1], call.args[3]
    w_t = w.checked_type
    if not isinstance(w_zero, Constant) or not isinstance(w_t, TensorType):
        return False
    if not isinstance(w, Constant):
        depth = w_t.shape[summed]
        if (
            w_t.dtype not in ("uint8", "int8")
            or w_zero.data.size != 1
            or not isinstance(depth, int)
        ):
            return False  # a depth known only at run time bounds nothing
        info, zero = np.iinfo(w_t.dtype), int(w_zero.data.reshape(-1)[0])
        largest = max(zero - int(info.min), int(info.max) - zero)
        return depth * largest * 255 < FLOAT32_INTEGERS
    shifted = np.abs(w.data.astype(np.int64) - w_zero.data.astype(np.int64))
    return int(shifted.sum(axis=summed).max(initial=0)) * 255 < FLOAT32_INTEGERS


def _channel_slices(call: Call, room: int) -> list[tuple[int, int]]:
    """Ranges of input channels whose part of the product keeps every partial sum below
    `room` (|w - zero point| summed per output, times 255, the largest |x - zero point|
    of 8-bit data); one range when the whole product does (real 3x3x64 layers: a few
    million); [] when the weight is not a constant or one channel alone is too much."""
    w, w_zero = call.args[1], call.args[3]
    if not isinstance(w, Constant) or not isinstance(w_zero, Constant):
        return []
    shifted = np.abs(w.data.astype(np.int64) - w_zero.data.astype(np.int64)) * 255
    per_channel = shifted.reshape(shifted.shape[0], shifted.shape[1], -1).sum(axis=2)
    slices: list[tuple[int, int]] = []
    start, used = 0, np.zeros(per_channel.shape[0], np.int64)
    for c in range(per_channel.shape[1]):
        if int((used + per_channel[:, c]).max(initial=0)) >= room:
            if c == start:
                return []
            slices.append((start, c))
            start, used = c, np.zeros_like(used)
        used += per_channel[:, c]
    slices.append((start, per_channel.shape[1]))
    return slices


def canonicalize(fn: Function) -> tuple[Function, int, int]:
    """fn with every quantised call lowered but those kept for an integer kernel; how many
    were lowered and how many kept."""
    counts = [0, 0]

    def lower(call: Call, args: list[Expr], lookup: Lookup) -> Expr:
        keep = _stays(call)
        counts[keep] += 1
        return lowered(call, args, lookup)

    out = rewrite_calls(fn, frozenset(QNN_OPS), lower)
    return out, counts[0], counts[1]


@register_pass
@dataclass(frozen=True)
class CanonicalizeQnn(FunctionPass):
    """Quantised ops as ordinary arithmetic (see the module docstring)."""

    idempotent = True
    opt_level = 0
    required = ("InferType",)

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out, count, kept = canonicalize(fn)
        record(QnnReport(lowered=count, kept=kept))
        return out


@dataclass(frozen=True, slots=True)
class QnnReport(PassReport):
    """Quantised calls lowered to arithmetic in one function, and those kept for the code
    generator's integer kernels."""

    lowered: int
    kept: int = 0
