"""Converters of reductions: Reduce{Mean,Sum,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare},
ArgMax and ArgMin (the first or the last of equal values), CumSum and CumProd."""

from __future__ import annotations

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from .node import Node, axes_of, converter


@converter("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")
def _reduce(n: Node) -> Expr:
    name = n.op_type[len("Reduce") :].lower()
    axes = axes_of(n, 1)
    if not axes and n.attr("noop_with_empty_axes", 0):  # absent or empty: nothing to reduce
        return n.x()
    keep = bool(n.attr("keepdims", 1))
    return op.call(name, n.x(), axis=tuple(axes) if axes else None, keepdims=keep)


@converter("ArgMax")
def _argmax(n: Node) -> Expr:
    if n.attr("select_last_index", 0):
        return last_index(n, n.x())
    return op.argmax(n.x(), axis=int(n.attr("axis", 0)), keepdims=bool(n.attr("keepdims", 1)))


@converter("ArgMin")
def _argmin(n: Node) -> Expr:
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
        return last_index(n, flipped)
    return op.argmax(flipped, axis=int(n.attr("axis", 0)), keepdims=bool(n.attr("keepdims", 1)))


REDUCE_FORMS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@converter(*REDUCE_FORMS)
def _reduce_form(n: Node) -> Expr:
    x = n.x()
    axes = axes_of(n, 1)
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


def _cumulative(n: Node, name: str) -> Expr:
    axis = n.const(1)
    if axis is None:
        raise FrontendError("the axis input must be a constant")
    return op.call(
        name,
        n.x(0),
        axis=int(np.asarray(axis).reshape(-1)[0]),
        exclusive=bool(n.attr("exclusive", 0)),
        reverse=bool(n.attr("reverse", 0)),
    )


@converter("CumSum")
def _cumsum(n: Node) -> Expr:
    return _cumulative(n, "cumsum")


@converter("CumProd")
def _cumprod(n: Node) -> Expr:
    return _cumulative(n, "cumprod")


def last_index(n: Node, flipped: Expr) -> Expr:
    """Arg-max of `flipped` picking the last of equal values: the arg-max of the tensor
    reversed along the axis, counted from the end."""
    t = n.type()
    axis = int(n.attr("axis", 0)) % t.ndim
    size = t.shape[axis]
    reversed_ = op.strided_slice(
        flipped, begin=(size - 1,), end=(-size - 1,), strides=(-1,), axes=(axis,)
    )
    index = op.argmax(reversed_, axis=axis, keepdims=bool(n.attr("keepdims", 1)))
    return op.subtract(Constant(np.asarray(size - 1, dtype=np.int64)), index)
