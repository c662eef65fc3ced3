"""ONNX GridSample as a composition: the grid's normalised coordinates are mapped to input
positions (align_corners, border / reflection padding), each interpolation tap (1 for
nearest, 2 per axis for linear, 4 for cubic) is a gather from the input flattened over its
spatial axes, and the taps are summed with their weights. 2-D and 3-D (volumetric)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from .node import Node, converter

MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest", "cubic": "cubic",
         "bicubic": "cubic"}  # fmt: skip
CUBIC_A = -0.75


def _reflect(x: Expr, low: float, high: float, c) -> Expr:
    """x folded back into [low, high] as often as needed (ONNX's reflection padding)."""
    span = high - low
    if span <= 0:
        return op.zeros_like(x)
    below, above = op.less(x, c(low)), op.greater(x, c(high))
    excess = op.where(below, op.subtract(c(low), x), op.where(above, op.subtract(x, c(high)), c(0)))
    folds = op.floor(op.divide(excess, c(span)))
    rest = op.subtract(excess, op.multiply(folds, c(span)))
    even = op.equal(op.fmod(folds, c(2)), c(0))
    from_low = op.where(even, op.add(c(low), rest), op.subtract(c(high), rest))
    from_high = op.where(even, op.subtract(c(high), rest), op.add(c(low), rest))
    return op.where(below, from_low, op.where(above, from_high, x))


def _cubic_weights(t: Expr, c) -> list[Expr]:
    """Weights of the taps at -1, 0, 1, 2 around a position t in [0, 1)."""
    a = CUBIC_A

    def near(d: Expr) -> Expr:  # |d| <= 1
        return op.add(
            op.multiply(op.multiply(op.subtract(op.multiply(c(a + 2), d), c(a + 3)), d), d), c(1)
        )

    def far(d: Expr) -> Expr:  # 1 < |d| < 2
        inner = op.add(op.multiply(op.subtract(op.multiply(c(a), d), c(5 * a)), d), c(8 * a))
        return op.subtract(op.multiply(inner, d), c(4 * a))

    return [far(op.add(t, c(1))), near(t), near(op.subtract(c(1), t)), far(op.subtract(c(2), t))]


@converter("GridSample")
def _grid_sample(n: Node) -> Expr:
    t, g = n.type(0), n.type(1)
    spatial = t.ndim - 2
    if spatial not in (2, 3) or g.ndim != t.ndim or g.shape[-1] != spatial:
        raise FrontendError(
            f"GridSample takes (N, C, H, W[, D]) and a matching grid, got {t} and {g}"
        )
    mode = MODES.get(n.attr("mode", "linear"))
    padding = n.attr("padding_mode", "zeros")
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise FrontendError(f"mode {n.attr('mode')!r} / padding_mode {padding!r} is not supported")
    align = bool(n.attr("align_corners", 0))
    dtype = t.dtype

    def c(v: float) -> Constant:
        return Constant(np.asarray(v, dtype=dtype))

    sizes, out_shape = t.shape[2:], g.shape[1:-1]
    batch, channels = t.shape[:2]
    count = math.prod(out_shape)
    taps_per_axis = [
        _axis_taps(n.x(1), g.ndim, spatial - 1 - k, size, mode, padding, align, c)
        for k, size in enumerate(sizes)  # the grid lists x (the last axis) first
    ]
    strides = [math.prod(sizes[k + 1 :]) for k in range(spatial)]
    flat = op.reshape(n.x(0), (batch, channels, math.prod(sizes)))
    total: Expr | None = None
    for combo in itertools.product(*taps_per_axis):
        weight: Expr | None = None
        offset: Expr | None = None
        inside: Expr | None = None
        for k, (position, w) in enumerate(combo):
            size = sizes[k]
            if padding == "zeros":
                ok = op.logical_and(
                    op.greater_equal(position, c(0)), op.less_equal(position, c(size - 1))
                )
                inside = ok if inside is None else op.logical_and(inside, ok)
            elif padding == "reflection":
                low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
                position = _reflect(position, low, high, c)
            index = op.cast(op.clip(position, a_min=0.0, a_max=float(size - 1)), dtype="int64")
            term = op.multiply(index, Constant(np.asarray(strides[k], np.int64)))
            offset = term if offset is None else op.add(offset, term)
            if w is not None:
                weight = w if weight is None else op.multiply(weight, w)
        assert offset is not None
        index = op.broadcast_to(op.reshape(offset, (batch, 1, count)), (batch, channels, count))
        value = op.gather_elements(flat, index, axis=2, mode="fast")
        if inside is not None:
            weight = op.where(inside, weight if weight is not None else c(1), c(0))
        if weight is not None:
            value = op.multiply(value, op.reshape(weight, (batch, 1, count)))
        total = value if total is None else op.add(total, value)
    assert total is not None
    return op.reshape(total, (batch, channels, *out_shape))


def _axis_taps(
    grid: Expr,
    ndim: int,
    component: int,
    size: int,
    mode: str,
    padding: str,
    align: bool,
    c: Callable[[float], Constant],
) -> list[tuple[Expr, Expr | None]]:
    """The input positions one axis's taps read and their weights (None: weight 1)."""
    gk = op.squeeze(
        op.strided_slice(grid, begin=(component,), end=(component + 1,), axes=(ndim - 1,)),
        axis=(ndim - 1,),
    )
    x: Expr
    if align:
        x = op.multiply(op.add(gk, c(1)), c((size - 1) / 2))
    else:
        x = op.divide(op.subtract(op.multiply(op.add(gk, c(1)), c(size)), c(1)), c(2))
    low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if padding == "border":
        x = op.clip(x, a_min=0.0, a_max=float(size - 1))
    elif padding == "reflection":
        x = _reflect(x, low, high, c)
    if mode == "nearest":
        return [(op.round(x), None)]
    base = op.floor(x)
    frac = op.subtract(x, base)
    if mode == "linear":
        return [(base, op.subtract(c(1), frac)), (op.add(base, c(1)), frac)]
    weights = _cubic_weights(frac, c)
    return [(op.add(base, c(d)), w) for d, w in zip((-1, 0, 1, 2), weights, strict=True)]
