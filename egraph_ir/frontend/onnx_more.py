"""More ONNX converters, written as compositions of registry ops (no new op needed):
CastLike, Size, Range, ArgMin, ReduceL1/L2/LogSum/LogSumExp/SumSquare, Mod, Xor, Trilu, the
activations Elu/Selu/Celu/HardSigmoid/HardSwish/Swish/Softplus/Softsign/Mish/ThresholdedRelu/
PRelu/Shrink, IsNaN/IsInf, Tan/Sinh/Cosh and
Hardmax.
"""

from __future__ import annotations

import math

import numpy as np

from .. import op
from ..errors import FrontendError
from ..expr import Constant, Expr
from .onnx import _axes, _Node, cast, converter


@converter("CastLike")
def _cast_like(n: _Node) -> Expr:
    return cast(n, n.x(0), n.type(1).dtype)


@converter("BitCast")
def _bitcast(n: _Node) -> Expr:
    dtype = str(n.importer.onnx.helper.tensor_dtype_to_np_dtype(n.attr("to")))
    return op.bitcast(n.x(0), dtype=dtype)


@converter("Size")
def _size(n: _Node) -> Expr:
    return Constant(np.asarray(int(np.prod(n.type().shape)), dtype=np.int64))


@converter("Range")
def _range(n: _Node) -> Expr:
    given = [n.const(i) for i in range(3)]
    if any(v is None for v in given):
        raise FrontendError("start, limit and delta are required")
    start, limit, delta = (np.asarray(v).reshape(()) for v in given)  # scalars, or 1 value
    if float(delta) == 0:
        raise FrontendError("delta must not be 0")
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    values = start + np.arange(count, dtype=start.dtype) * delta  # ONNX: start + i * delta
    return Constant(values.astype(start.dtype))


@converter("ArgMin")
def _argmin(n: _Node) -> Expr:
    x, t = n.x(), n.type()
    # an order-reversing map that cannot overflow: -x for floats, -1 - x (= ~x) for integers
    if t.dtype.startswith("float"):
        flipped = op.negative(x)
    elif t.dtype.startswith("int"):
        flipped = op.subtract(Constant(np.asarray(-1, dtype=t.dtype)), x)
    elif t.dtype.startswith("uint"):  # max - x: order-reversing, never wraps
        flipped = op.subtract(Constant(np.asarray(np.iinfo(t.dtype).max, dtype=t.dtype)), x)
    else:
        raise FrontendError(f"ArgMin over {t.dtype} is not supported")
    if n.attr("select_last_index", 0):
        from .onnx_scan import last_index

        return last_index(n, flipped)
    return op.argmax(flipped, axis=int(n.attr("axis", 0)), keepdims=bool(n.attr("keepdims", 1)))


REDUCE_FORMS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@converter(*REDUCE_FORMS)
def _reduce_form(n: _Node) -> Expr:
    x = n.x()
    axes = _axes(n, 1)
    if not axes and n.attr("noop_with_empty_axes", 0):  # the per-element part only
        if n.op_type in ("ReduceL1", "ReduceL2"):
            return op.abs(x)
        if n.op_type == "ReduceSumSquare":
            return op.multiply(x, x)
        return op.log(x) if n.op_type == "ReduceLogSum" else x
    keep = bool(n.attr("keepdims", 1))

    def total(v: Expr) -> Expr:
        return op.sum(v, axis=tuple(axes) if axes else None, keepdims=keep)

    if n.op_type == "ReduceL1":
        return total(op.abs(x))
    if n.op_type == "ReduceL2":
        return op.sqrt(total(op.multiply(x, x)))
    if n.op_type == "ReduceSumSquare":
        return total(op.multiply(x, x))
    if n.op_type == "ReduceLogSum":
        return op.log(total(x))
    # log-sum-exp, shifted by the maximum so large inputs do not overflow
    peak = op.max(x, axis=tuple(axes) if axes else None, keepdims=True)
    shifted = op.log(op.sum(op.exp(op.subtract(x, peak)), axis=tuple(axes) if axes else None,
                            keepdims=keep))  # fmt: skip
    return op.add(shifted, peak if keep else op.max(x, axis=tuple(axes) if axes else None))


@converter("Mod")
def _mod(n: _Node) -> Expr:
    a, b = n.x(0), n.x(1)
    if n.attr("fmod", 0):
        return op.fmod(a, b)
    return op.mod(a, b)  # on floats too (the sign of the divisor), as ONNX's reference


@converter("Xor")
def _xor(n: _Node) -> Expr:
    return op.not_equal(n.x(0), n.x(1))


@converter("Trilu")
def _trilu(n: _Node) -> Expr:
    t = n.type()
    if t.ndim < 2:
        raise FrontendError(f"Trilu needs rank >= 2, got {t.ndim}")
    k = int(np.asarray(n.const(1, 0)).reshape(-1)[0]) if n.input(1) is not None else 0
    rows, cols = t.shape[-2:]
    band = np.triu if n.attr("upper", 1) else np.tril
    keep = band(np.ones((rows, cols), dtype=bool), k)
    return op.where(Constant(keep), n.x(), Constant(np.zeros((), dtype=t.dtype)))


@converter("Hardmax")
def _hardmax(n: _Node) -> Expr:
    t = n.type()
    axis = int(n.attr("axis", -1)) % max(t.ndim, 1)
    first = op.argmax(n.x(), axis=axis, keepdims=True)  # the first maximum, as ONNX wants
    shape = [1] * t.ndim
    shape[axis] = t.shape[axis]
    positions = Constant(np.arange(t.shape[axis], dtype=np.int64).reshape(shape))
    return op.cast(op.equal(positions, first), dtype=t.dtype)


# ---------------------------------------------------------------- activations as formulas
def _c(n: _Node, value: float) -> Expr:
    """A scalar constant of the input's dtype."""
    return Constant(np.asarray(value, dtype=n.type().dtype))


def _exp_minus_one(x: Expr, n: _Node) -> Expr:
    return op.subtract(op.exp(x), _c(n, 1.0))


@converter("Elu", "Selu", "Celu")
def _elu_family(n: _Node) -> Expr:
    x = n.x()
    if n.op_type == "Celu":  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
        alpha = float(n.attr("alpha", 1.0))
        neg = op.multiply(_c(n, alpha), _exp_minus_one(op.divide(x, _c(n, alpha)), n))
        return op.add(op.maximum(x, _c(n, 0.0)), op.minimum(neg, _c(n, 0.0)))
    default_alpha = 1.0 if n.op_type == "Elu" else 1.67326319217681884765625
    alpha = float(n.attr("alpha", default_alpha))
    neg = op.multiply(_c(n, alpha), _exp_minus_one(x, n))
    out = op.where(op.less(x, _c(n, 0.0)), neg, x)
    if n.op_type == "Selu":
        out = op.multiply(_c(n, float(n.attr("gamma", 1.05070102214813232421875))), out)
    return out


@converter("HardSigmoid", "HardSwish")
def _hard_sigmoid(n: _Node) -> Expr:
    x = n.x()
    alpha = float(n.attr("alpha", 0.2 if n.op_type == "HardSigmoid" else 1 / 6))
    beta = float(n.attr("beta", 0.5))
    gate = op.clip(op.add(op.multiply(x, _c(n, alpha)), _c(n, beta)), a_min=0.0, a_max=1.0)
    return gate if n.op_type == "HardSigmoid" else op.multiply(x, gate)


@converter("Swish")
def _swish(n: _Node) -> Expr:
    x = n.x()
    return op.multiply(x, op.sigmoid(op.multiply(x, _c(n, float(n.attr("alpha", 1.0))))))


def _softplus(x: Expr, n: _Node) -> Expr:
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))
    tail = op.log(op.add(_c(n, 1.0), op.exp(op.negative(op.abs(x)))))
    return op.add(op.maximum(x, _c(n, 0.0)), tail)


@converter("Softplus", "Softsign", "Mish")
def _soft(n: _Node) -> Expr:
    x = n.x()
    if n.op_type == "Softplus":
        return _softplus(x, n)
    if n.op_type == "Softsign":
        return op.divide(x, op.add(_c(n, 1.0), op.abs(x)))
    return op.multiply(x, op.tanh(_softplus(x, n)))


@converter("ThresholdedRelu")
def _thresholded_relu(n: _Node) -> Expr:
    x = n.x()
    return op.where(op.greater(x, _c(n, float(n.attr("alpha", 1.0)))), x, _c(n, 0.0))


@converter("PRelu")
def _prelu(n: _Node) -> Expr:
    x, slope = n.x(0), n.x(1)
    return op.where(op.less(x, _c(n, 0.0)), op.multiply(x, slope), x)


@converter("Shrink")
def _shrink(n: _Node) -> Expr:
    x = n.x()
    bias, lambd = float(n.attr("bias", 0.0)), float(n.attr("lambd", 0.5))
    low = op.where(op.less(x, _c(n, -lambd)), op.add(x, _c(n, bias)), _c(n, 0.0))
    return op.where(op.greater(x, _c(n, lambd)), op.subtract(x, _c(n, bias)), low)


@converter("IsNaN", "IsInf")
def _is_special(n: _Node) -> Expr:
    x = n.x()
    if n.op_type == "IsNaN":
        return op.not_equal(x, x)
    pos, neg = op.equal(x, _c(n, np.inf)), op.equal(x, _c(n, -np.inf))
    want_pos, want_neg = n.attr("detect_positive", 1), n.attr("detect_negative", 1)
    if want_pos and want_neg:
        return op.logical_or(pos, neg)
    if want_pos:
        return pos
    if want_neg:
        return neg
    return op.logical_and(pos, neg)  # neither: always false


@converter("Tan", "Sinh", "Cosh")
def _trig(n: _Node) -> Expr:
    x = n.x()
    if n.op_type == "Tan":
        return op.divide(op.sin(x), op.cos(x))
    up, down = op.exp(x), op.exp(op.negative(x))
    both = op.subtract(up, down) if n.op_type == "Sinh" else op.add(up, down)
    return op.multiply(both, _c(n, 0.5))
