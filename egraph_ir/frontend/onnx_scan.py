"""ONNX converters for cumulative sums and products, bit shifts, RMS normalisation and
arg-max/min that pick the last of equal values."""

from __future__ import annotations

import numpy as np

from .. import op
from ..errors import FrontendError
from ..expr import Constant, Expr
from .onnx import _Node, converter


def _cumulative(n: _Node, name: str) -> Expr:
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
def _cumsum(n: _Node) -> Expr:
    return _cumulative(n, "cumsum")


@converter("CumProd")
def _cumprod(n: _Node) -> Expr:
    return _cumulative(n, "cumprod")


@converter("BitShift")
def _bit_shift(n: _Node) -> Expr:
    direction = n.attr("direction", "")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise FrontendError(f"direction must be LEFT or RIGHT, got {direction!r}")
    shift = op.left_shift if direction == "LEFT" else op.right_shift
    return shift(n.x(0), n.x(1))


@converter("RMSNormalization")
def _rms_norm(n: _Node) -> Expr:
    """x / sqrt(mean(x^2 over the axes from `axis` on) + epsilon) * scale, computed in
    float32 for float16 inputs (the default stash_type)."""
    t = n.type()
    axis = n.attr("axis", -1) % t.ndim
    eps = float(n.attr("epsilon", 1e-5))
    x, scale = n.x(0), n.x(1)
    wide = t.dtype == "float16" and n.attr("stash_type", 1) == 1
    if wide:
        x = op.cast(x, dtype="float32")
    dtype = "float32" if wide else t.dtype
    axes = tuple(range(axis, t.ndim))
    mean_square = op.mean(op.multiply(x, x), axis=axes, keepdims=True)
    inv = op.rsqrt(op.add(mean_square, Constant(np.asarray(eps, dtype=dtype))))
    normed = op.multiply(x, inv)
    if wide:
        normed = op.cast(normed, dtype=t.dtype)
    return op.multiply(normed, scale)


def last_index(n: _Node, flipped: Expr) -> Expr:
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
