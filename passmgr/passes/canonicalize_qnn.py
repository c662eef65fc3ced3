"""CanonicalizeQnn: the quantised ops (egraph_ir/op/qnn.py) as ordinary arithmetic, which
the code generator compiles (TVM's qnn CanonicalizeOps). FakeQuantizationToInteger runs
first, while the e-graph can still see dequantize -> op -> quantize chains.

- dequantize: (float32(x) - float32(zero point)) * scale;
- quantize: clip(round(x / scale) + zero point) in the zero point's type;
- requantize: clip(round(float32(acc) * multiplier) + zero point);
- qnn_conv2d / qnn_dense: the float convolution or product of the shifted integers, as
  int32: in float32 when the weights bound every partial sum below 2**24 (then each sum
  is exact in any order), else in float64 (exact up to 2**53). Either way this is the
  int32 result; FoldConstant then turns the shifted weights into float constants.
  (Integer kernels, VNNI, are issue #32's next step.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_ir import op
from egraph_ir.expr import Call, Constant, Expr, Function, GlobalVar, Var
from egraph_ir.module import IRModule
from egraph_ir.op.qnn import integer_range
from egraph_ir.registry import Op
from egraph_ir.visitor import post_order, rebuild

from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record

QNN_OPS = ("dequantize", "quantize", "requantize", "qnn_conv2d", "qnn_dense")


def _f32(e: Expr) -> Expr:
    return op.cast(e, dtype="float32")


def _saturated(value: Expr, zero: Expr, dtype: str) -> Expr:
    """value + zero point, clipped to the zero point's type (dtype) and cast to it."""
    low, high = integer_range(dtype)
    shifted = op.add(value, _f32(zero))
    return op.cast(op.clip(shifted, a_min=float(low), a_max=float(high)), dtype=dtype)


def _shifted(x: Expr, zero: Expr, dtype: str) -> Expr:
    return op.subtract(op.cast(x, dtype=dtype), op.cast(zero, dtype=dtype))


def lowered(call: Call, args: list[Expr]) -> Expr:
    """One quantised call (typed) as arithmetic over its (already lowered) arguments."""
    name = call.op.name  # type: ignore[union-attr]
    dtype = call.checked_type.dtype  # type: ignore[attr-defined]
    if name == "dequantize":
        x, scale, zero = args
        return op.multiply(op.subtract(_f32(x), _f32(zero)), scale)
    if name == "quantize":
        x, scale, zero = args
        return _saturated(op.round(op.divide(x, scale)), zero, dtype)
    if name == "requantize":
        acc, multiplier, zero = args
        return _saturated(op.round(op.multiply(_f32(acc), multiplier)), zero, dtype)
    x, w, x_zero, w_zero = args
    wide = "float32" if _float32_exact(call) else "float64"
    shifted_x, shifted_w = _shifted(x, x_zero, wide), _shifted(w, w_zero, wide)
    if name == "qnn_conv2d":
        exact = op.conv2d(shifted_x, shifted_w, **call.attrs)
    else:
        exact = op.dense(shifted_x, shifted_w)
    return op.cast(exact, dtype="int32")


FLOAT32_INTEGERS = 2**24  # every integer below this is a float32


def _float32_exact(call: Call) -> bool:
    """Whether every partial sum of this product is an integer below 2**24, so float32
    computes it exactly in any order: a constant weight whose largest per-output sum of
    |w - zero point| times the largest |x - zero point| (255 for 8-bit data) stays below
    2**24 (real 3x3x64 layers: a few million; 3x3x512 may not, and take float64)."""
    w, w_zero = call.args[1], call.args[3]
    if not isinstance(w, Constant) or not isinstance(w_zero, Constant):
        return False
    shifted = np.abs(w.data.astype(np.int64) - w_zero.data.astype(np.int64))
    per_output = shifted.reshape(shifted.shape[0], -1).sum(axis=1)
    return int(per_output.max(initial=0)) * 255 < FLOAT32_INTEGERS


def canonicalize(fn: Function) -> tuple[Function, int]:
    """fn with every quantised call lowered; how many there were."""
    memo: dict[Expr, Expr] = {}
    count = 0
    for node in post_order(fn):
        if isinstance(node, Var | Constant | GlobalVar):
            memo[node] = node
            continue
        post = rebuild(node, memo)
        if isinstance(post, Call) and isinstance(post.op, Op) and post.op.name in QNN_OPS:
            post = lowered(node, list(post.args))  # type: ignore[arg-type]
            count += 1
        memo[node] = post
    out = memo[fn]
    assert isinstance(out, Function)
    return out, count


@register_pass
@dataclass(frozen=True)
class CanonicalizeQnn(FunctionPass):
    """Quantised ops as ordinary arithmetic (see the module docstring)."""

    idempotent = True
    opt_level = 0
    required = ("InferType",)

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out, count = canonicalize(fn)
        record(QnnReport(lowered=count))
        return out


@dataclass(frozen=True, slots=True)
class QnnReport(PassReport):
    """Quantised calls lowered to arithmetic in one function."""

    lowered: int
