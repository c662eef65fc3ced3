"""Converters of elementwise ONNX ops: arithmetic, comparisons, logic and bit operations,
unary math, casts, Where and Clip."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from ...types import FLOAT_DTYPES
from .node import Node, converter, scalar_like

# ---------------------------------------------------------------- converters
_UNARY = {
    "Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Erf": "erf", "Abs": "abs", "Neg": "negative", "Floor": "floor",
    "Ceil": "ceil", "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos",
    "Not": "logical_not", "BitwiseNot": "bitwise_not", "Acos": "acos", "Asin": "asin",
    "Atan": "atan", "Acosh": "acosh", "Asinh": "asinh", "Atanh": "atanh",
}  # fmt: skip


_BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}  # fmt: skip


@converter(*_UNARY)
def _unary(n: Node) -> Expr:
    return op.call(_UNARY[n.op_type], n.x())


@converter(*_BINARY)
def _binary(n: Node) -> Expr:
    a, b = n.x(0), n.x(1)
    dtype = n.type(0).dtype
    if n.op_type == "Pow" and dtype not in FLOAT_DTYPES:  # integers: exact in float64
        wide = op.power(op.cast(a, dtype="float64"), op.cast(b, dtype="float64"))
        return op.cast(wide, dtype=dtype)
    if n.op_type == "Pow" and n.type(1).dtype != dtype:
        b = op.cast(b, dtype=dtype)
    return op.call(_BINARY[n.op_type], a, b)


@converter("Max", "Min", "Sum", "Mean")
def _variadic(n: Node) -> Expr:
    name = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[n.op_type]
    xs = n.inputs()
    out = xs[0]
    for x in xs[1:]:
        out = op.call(name, out, x)
    if n.op_type == "Mean":
        out = op.divide(out, Constant(np.asarray(len(xs), dtype=n.type(0).dtype)))
    return out


@converter("Reciprocal")
def _reciprocal(n: Node) -> Expr:
    return op.divide(Constant(np.asarray(1, dtype=n.type().dtype)), n.x())


@converter("Identity")
def _identity(n: Node) -> Expr:
    return n.x()


@converter("Where")
def _where(n: Node) -> Expr:
    return op.where(n.x(0), n.x(1), n.x(2))


@converter("Clip")
def _clip(n: Node) -> Expr:
    low, high = n.const(1), n.const(2)
    a_min = float(low) if low is not None else float(n.attr("min", -np.inf))
    a_max = float(high) if high is not None else float(n.attr("max", np.inf))
    return op.clip(n.x(), a_min=a_min, a_max=a_max)


@converter("Cast")
def _cast(n: Node) -> Expr:
    dtype = str(n.importer.onnx.helper.tensor_dtype_to_np_dtype(n.attr("to")))
    return cast(n, n.x(), dtype)


def cast(n: Node, x: Expr, dtype: str) -> Expr:
    """Cast and CastLike: a float cast to a float8 format saturates by default (values
    beyond its largest finite value, infinities included, clip to it)."""
    source = n.type(0).dtype
    if dtype.startswith("float8") and source in FLOAT_DTYPES and n.attr("saturate", 1):
        top = float(ml_dtypes.finfo(dtype).max)
        x = op.clip(x, a_min=-top, a_max=top)
    return op.cast(x, dtype=dtype)


@converter("CastLike")
def _cast_like(n: Node) -> Expr:
    return cast(n, n.x(0), n.type(1).dtype)


@converter("BitCast")
def _bitcast(n: Node) -> Expr:
    dtype = str(n.importer.onnx.helper.tensor_dtype_to_np_dtype(n.attr("to")))
    return op.bitcast(n.x(0), dtype=dtype)


@converter("Mod")
def _mod(n: Node) -> Expr:
    a, b = n.x(0), n.x(1)
    if n.attr("fmod", 0):
        return op.fmod(a, b)
    return op.mod(a, b)  # on floats too (the sign of the divisor), as ONNX's reference


@converter("Xor")
def _xor(n: Node) -> Expr:
    return op.not_equal(n.x(0), n.x(1))


@converter("IsNaN", "IsInf")
def _is_special(n: Node) -> Expr:
    x = n.x()
    if n.op_type == "IsNaN":
        return op.not_equal(x, x)
    pos, neg = op.equal(x, scalar_like(n, np.inf)), op.equal(x, scalar_like(n, -np.inf))
    want_pos, want_neg = n.attr("detect_positive", 1), n.attr("detect_negative", 1)
    if want_pos and want_neg:
        return op.logical_or(pos, neg)
    if want_pos:
        return pos
    if want_neg:
        return neg
    return op.logical_and(pos, neg)  # neither: always false


@converter("Tan", "Sinh", "Cosh")
def _trig(n: Node) -> Expr:
    x = n.x()
    if n.op_type == "Tan":
        return op.divide(op.sin(x), op.cos(x))
    up, down = op.exp(x), op.exp(op.negative(x))
    both = op.subtract(up, down) if n.op_type == "Sinh" else op.add(up, down)
    return op.multiply(both, scalar_like(n, 0.5))


@converter("BitShift")
def _bit_shift(n: Node) -> Expr:
    direction = n.attr("direction", "")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise FrontendError(f"direction must be LEFT or RIGHT, got {direction!r}")
    shift = op.left_shift if direction == "LEFT" else op.right_shift
    return shift(n.x(0), n.x(1))
