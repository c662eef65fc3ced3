"""requantize as an integer kernel epilogue: the int32 sums of an int8 convolution or
product back to 8 bits, as ONNX Runtime computes them (egraph_ir/op/qnn.py:
requantize_ref: the float32 product of the sum and the multiplier, rounded half to even,
plus the zero point, saturated).

CanonicalizeQnn writes requantize as float arithmetic where the code generator has no
form of its own; this one rounds the product straight to int32 and adds the zero point
and saturates in integers: LLVM makes it 5 vector instructions per 16 values (convert,
multiply, convert rounding, max, saturating narrow store) where the float form took 11 (a
second pair of clamps, the zero point and the conversion in floats), about a third of an
int8 pointwise convolution's instructions (docs/performance.md: measured changes).
Exact because the multiplier is a
constant of at most MAX_MULTIPLIER: the rounded product of an int32 stays well inside
int32, so the conversion cannot overflow, and within the 8-bit range the float and
integer additions of the zero point agree (integers below 2**24)."""

from __future__ import annotations

import numpy as np

from egraph_ir.expr import Call, Constant
from egraph_ir.op.qnn import integer_range
from egraph_ir.support import register_native_form
from egraph_ir.types import TensorType

from ...loop_ir import Bin, Cast, LExpr, Un, const
from .definitions import Ctx, compute

MAX_MULTIPLIER = 0.25  # |float32(int32) * m| <= 2**29: rounds to an int32 without overflow


def integer_requantize(call: Call) -> bool:
    """An int32 sum to 8 bits by a constant finite multiplier of at most MAX_MULTIPLIER
    and a constant zero point."""
    acc, multiplier, zero = call.args
    acc_t, out_t = acc.checked_type, call.checked_type
    if not (isinstance(acc_t, TensorType) and isinstance(out_t, TensorType)):
        return False
    if not (isinstance(multiplier, Constant) and isinstance(zero, Constant)):
        return False
    m = multiplier.data
    return (
        acc_t.dtype == "int32"
        and out_t.dtype in ("uint8", "int8")
        and m.dtype == np.float32
        and bool(np.isfinite(m).all())
        and float(np.abs(m).max(initial=0.0)) <= MAX_MULTIPLIER
    )


@compute("requantize")
def _requantize(ctx: Ctx) -> LExpr:
    product = Bin("float32", "mul", Cast("float32", ctx.arg(0)), ctx.arg(1))
    whole = Cast("int32", Un("float32", "round", product), exact=True)
    shifted = Bin("int32", "add", whole, Cast("int32", ctx.arg(2)))
    low, high = integer_range(ctx.out.dtype)
    bounded = Bin(
        "int32", "min", Bin("int32", "max", shifted, const(low, "int32")), const(high, "int32")
    )
    return Cast(ctx.out.dtype, bounded, exact=True)


register_native_form("requantize", integer_requantize)
