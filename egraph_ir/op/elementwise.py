"""Elementwise ops: unary math, binary arithmetic/comparison with numpy broadcasting, where."""

from __future__ import annotations

import math

import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, ShapeError, register_op
from ..types import FLOAT_DTYPES, TensorType, Type
from ._common import (
    INTEGER,
    NUMERIC,
    TRANSCENDENTAL,
    binary,
    broadcast_shapes,
    per_output_element,
    require_dtype,
    same_dtype,
    unary,
)

SIGNED = ("int8", "int16", "int32", "int64", "float16", "float32", "float64")
_erf_f64 = np.frompyfunc(math.erf, 1, 1)


def erf_ref(x: np.ndarray) -> np.ndarray:
    """Exact erf (math.erf per element, in float64), cast back to the input dtype."""
    return np.asarray(_erf_f64(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def sigmoid_ref(x: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    return (one / (one + np.exp(-x))).astype(x.dtype)


def gelu_ref(x: np.ndarray, approximate: str) -> np.ndarray:
    t = x.dtype.type
    if approximate == "tanh":
        inner = t(math.sqrt(2.0 / math.pi)) * (x + t(0.044715) * x * x * x)
        return (t(0.5) * x * (t(1) + np.tanh(inner))).astype(x.dtype)
    return (t(0.5) * x * (t(1) + erf_ref(x / t(math.sqrt(2.0))))).astype(x.dtype)


def divide_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float division; integer division truncates toward zero (C, ONNX, LLVM sdiv); x/0 -> 0."""
    if a.dtype.kind == "f":
        return np.divide(a, b)
    dtype = np.result_type(a, b)
    safe = np.where(b == 0, 1, b).astype(dtype)
    with np.errstate(all="ignore"):  # INT_MIN // -1 wraps to INT_MIN, as compiled code does
        q = np.floor_divide(a, safe)
        inexact = (a - q * safe) != 0
    # floor to truncation: one up where the signs differ and the division is inexact
    q = np.where(inexact & ((a < 0) != (safe < 0)), q + 1, q)
    return np.where(b == 0, 0, q).astype(dtype)


def _remainder(numpy_fn, what: str):
    """A remainder reference: `numpy_fn` on floats; on integers `x % 0` is 0, as x / 0 is."""

    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = np.result_type(a, b)
        with np.errstate(all="ignore"):
            if dtype.kind == "f":
                return numpy_fn(a, b).astype(dtype)
            safe = np.where(b == 0, 1, b).astype(dtype)
            return np.where(b == 0, 0, numpy_fn(a, safe)).astype(dtype)

    ref.__doc__ = what
    return ref


fmod_ref = _remainder(np.fmod, "C fmod: the remainder takes the dividend's sign")
mod_ref = _remainder(np.mod, "floor modulo (Python's %): the remainder takes the divisor's sign")


def _cast_like(fn):
    """Wrap a numpy function so the result keeps the first input's dtype."""

    def ref(x: np.ndarray, *rest: np.ndarray, **attrs: object) -> np.ndarray:
        return np.asarray(fn(x, *rest, **attrs)).astype(x.dtype, copy=False)

    return ref


def _unary(
    name, ref, allowed=NUMERIC, flops=1.0, attrs=(), doc="", out_dtype=None,
    pattern=OpPattern.ELEMWISE,
):  # fmt: skip
    register_op(
        Op(
            name=name,
            inputs=("data",),
            infer=unary(allowed, out_dtype),
            reference=ref,
            pattern=pattern,
            flops=per_output_element(flops),
            attrs=attrs,
            doc=doc,
        )
    )


_unary("negative", _cast_like(np.negative), SIGNED, doc="-x")
_unary("abs", _cast_like(np.abs), doc="|x|")
_unary("exp", np.exp, FLOAT_DTYPES, TRANSCENDENTAL)
_unary("log", np.log, FLOAT_DTYPES, TRANSCENDENTAL, doc="natural logarithm")
_unary("sqrt", np.sqrt, FLOAT_DTYPES, TRANSCENDENTAL)
_unary(
    "rsqrt",
    lambda x: (x.dtype.type(1) / np.sqrt(x)).astype(x.dtype),
    FLOAT_DTYPES,
    TRANSCENDENTAL,
    doc="1 / sqrt(x)",
)
_unary("tanh", np.tanh, FLOAT_DTYPES, TRANSCENDENTAL)
_unary("sigmoid", sigmoid_ref, FLOAT_DTYPES, TRANSCENDENTAL, doc="1 / (1 + exp(-x))")
_unary("relu", _cast_like(lambda x: np.maximum(x, x.dtype.type(0))), SIGNED, doc="max(x, 0)")
_unary(
    "leaky_relu",
    lambda x, alpha: np.where(x > 0, x, x * x.dtype.type(alpha)).astype(x.dtype),
    FLOAT_DTYPES,
    2.0,
    (AttrSpec("alpha", "float", 0.01),),
    doc="x if x > 0 else alpha * x",
)
_unary(
    "gelu",
    gelu_ref,
    FLOAT_DTYPES,
    TRANSCENDENTAL + 4,
    (AttrSpec("approximate", "str", "none", ("none", "tanh")),),
    doc="x * Phi(x); approximate='tanh' uses the tanh formula",
)
_unary("erf", erf_ref, FLOAT_DTYPES, TRANSCENDENTAL, doc="the error function")
_unary("sin", np.sin, FLOAT_DTYPES, TRANSCENDENTAL)
_unary("cos", np.cos, FLOAT_DTYPES, TRANSCENDENTAL)
_unary("floor", np.floor, FLOAT_DTYPES)
_unary("ceil", np.ceil, FLOAT_DTYPES)
_unary("round", np.round, FLOAT_DTYPES, doc="round half to even (as numpy and ONNX)")
_unary("sign", _cast_like(np.sign), SIGNED)


def clip_bounds(a_min: float, a_max: float, dtype: str) -> tuple[np.generic, np.generic] | None:
    """An integer clip's bounds as elements of dtype by the cast rule (truncate, saturate):
    clipping in floats and casting back gives the same; None when a bound is NaN (every
    element would be NaN, which casts to 0)."""
    if np.isnan(a_min) or np.isnan(a_max):
        return None
    lo, hi = cast_ref(np.array([a_min, a_max]), dtype)
    return lo, hi


def _clip_ref(x: np.ndarray, a_min: float, a_max: float) -> np.ndarray:
    """numpy's clip; on integers with the bounds of clip_bounds."""
    if x.dtype.kind not in "iu":
        return np.clip(x, a_min, a_max).astype(x.dtype)
    bounds = clip_bounds(a_min, a_max, str(x.dtype))
    if bounds is None:
        return np.zeros_like(x)
    return np.minimum(np.maximum(x, bounds[0]), bounds[1])


_unary(
    "clip",
    _clip_ref,
    NUMERIC,
    2.0,
    (AttrSpec("a_min", "float"), AttrSpec("a_max", "float")),
    doc="min(max(x, a_min), a_max)",
)
_unary("logical_not", np.logical_not, ("bool",))


def bitcast_ref(x: np.ndarray, dtype: str) -> np.ndarray:
    """The same bytes read as another dtype of the same width (little endian)."""
    return np.ascontiguousarray(x).view(np.dtype(dtype)).reshape(x.shape)


def _bitcast_infer(args: list[TensorType], attrs: Attrs) -> Type:
    (x,) = args
    if np.dtype(x.dtype).itemsize != np.dtype(attrs["dtype"]).itemsize:
        raise ShapeError(f"bitcast keeps the width: {x.dtype} and {attrs['dtype']} differ")
    return TensorType(x.shape, attrs["dtype"])


register_op(
    Op(
        name="bitcast",
        inputs=("data",),
        infer=_bitcast_infer,
        reference=bitcast_ref,
        pattern=OpPattern.OPAQUE,
        flops=per_output_element(0.0),
        attrs=(AttrSpec("dtype", "dtype"),),
        doc="reinterpret the bits as another dtype of the same width (ONNX BitCast)",
    )
)
_unary("bitwise_not", np.invert, INTEGER, doc="flip every bit (two's complement for signed)")
for _name, _inverse in [
    ("acos", np.arccos), ("asin", np.arcsin), ("atan", np.arctan),
    ("acosh", np.arccosh), ("asinh", np.arcsinh), ("atanh", np.arctanh),
]:  # fmt: skip
    # opaque: no compute definition yet, so a group of their own runs on the host alone
    # instead of taking its elementwise neighbours there too
    _unary(_name, _cast_like(_inverse), FLOAT_DTYPES, TRANSCENDENTAL,
           doc="NaN outside the domain", pattern=OpPattern.OPAQUE)  # fmt: skip


def _cast_infer(args: list[TensorType], attrs: Attrs) -> Type:
    return TensorType(args[0].shape, attrs["dtype"])


def cast_ref(x: np.ndarray, dtype: str) -> np.ndarray:
    """numpy's astype, except float to integer saturates: NaN gives 0, values beyond the
    integer range give its minimum or maximum (numpy leaves those undefined; LLVM's
    fptosi.sat, which compiled code uses, defines them this way)."""
    target = np.dtype(dtype)
    if x.dtype.kind != "f" or target.kind not in "iu":
        return x.astype(dtype)
    info = np.iinfo(target)
    y = np.trunc(x.astype(np.float64))
    low, high = float(info.min), float(info.max) + 1.0  # both exact powers of two
    inside = (y >= low) & (y < high)
    safe = np.where(inside, y, 0.0).astype(dtype)
    out = np.where(y >= high, info.max, np.where(y < low, info.min, safe))
    return np.where(np.isnan(y), 0, out).astype(dtype)


register_op(
    Op(
        name="cast",
        inputs=("data",),
        infer=_cast_infer,
        reference=cast_ref,
        pattern=OpPattern.ELEMWISE,
        flops=per_output_element(0.0),
        attrs=(AttrSpec("dtype", "dtype"),),
        doc="convert to another dtype (float to int truncates toward zero and saturates; "
        "NaN gives 0)",
    )
)


def _binary(name, ref, allowed=NUMERIC, out_dtype=None, flops=1.0, doc=""):
    register_op(
        Op(
            name=name,
            inputs=("lhs", "rhs"),
            infer=binary(allowed, out_dtype),
            reference=ref,
            pattern=OpPattern.BROADCAST,
            flops=per_output_element(flops),
            doc=doc,
        )
    )


def _keep(fn):
    """A binary numpy function whose result keeps the operands' common dtype."""
    return lambda a, b: np.asarray(fn(a, b)).astype(np.result_type(a, b), copy=False)


_binary("add", _keep(np.add))
_binary("subtract", _keep(np.subtract))
_binary("multiply", _keep(np.multiply))
_binary("divide", divide_ref, doc="true division for floats; integers truncate, x / 0 = 0")
_binary("fmod", fmod_ref, doc="remainder with the dividend's sign (C fmod); ints: x fmod 0 = 0")
_binary("mod", mod_ref, doc="remainder with the divisor's sign (Python %); ints: x mod 0 = 0")


def power_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's pow (IEEE 754: pow(-inf, 0.5) = inf, pow(-0, 0.5) = +0), as compiled code
    computes it. numpy's loop reads a uniform exponent of 0.5 (a scalar, or a broadcast
    one) as sqrt, which differs at those two values, so both operands are laid out in
    full, as one flat array each, before the loop sees them."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    flat = np.power(np.array(a).reshape(-1), np.array(b).reshape(-1))
    return flat.reshape(a.shape).astype(np.result_type(a, b), copy=False)


_binary("power", power_ref, FLOAT_DTYPES, flops=TRANSCENDENTAL)


def _extremum(fn):
    """numpy's maximum/minimum, with float16 computed in float32 (exact): numpy's float16
    loop returns the first of two equal values (+0.0 against -0.0) where its float32 and
    float64 loops, and the compiled code for every float, return the second."""

    def ref(a, b):
        dtype = np.result_type(a, b)
        if dtype == np.float16:
            wide = fn(np.asarray(a, np.float32), np.asarray(b, np.float32))
            return np.asarray(wide).astype(dtype)
        return np.asarray(fn(a, b)).astype(dtype, copy=False)

    return ref


_binary("maximum", _extremum(np.maximum), doc="elementwise max (NaN propagates)")
_binary("minimum", _extremum(np.minimum), doc="elementwise min (NaN propagates)")
for _name, _fn in [
    ("equal", np.equal),
    ("not_equal", np.not_equal),
    ("less", np.less),
    ("less_equal", np.less_equal),
    ("greater", np.greater),
    ("greater_equal", np.greater_equal),
]:
    _binary(_name, _fn, NUMERIC + ("bool",), out_dtype="bool")
_binary("logical_and", np.logical_and, ("bool",))
_binary("logical_or", np.logical_or, ("bool",))
for _name, _bits in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                     ("bitwise_xor", np.bitwise_xor)]:  # fmt: skip
    _binary(_name, _keep(_bits), INTEGER, doc="per bit, on integers")


def _where_infer(args: list[TensorType], attrs: Attrs) -> Type:
    cond, x, y = args
    require_dtype(cond, ("bool",), "condition")
    dtype = same_dtype([x, y])
    return TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), dtype)


register_op(
    Op(
        name="where",
        inputs=("condition", "x", "y"),
        infer=_where_infer,
        reference=lambda c, x, y: np.where(c, x, y),
        pattern=OpPattern.BROADCAST,
        flops=per_output_element(1.0),
        doc="x where condition else y",
    )
)

__all__ = ["INTEGER", "divide_ref", "erf_ref", "gelu_ref", "sigmoid_ref"]
