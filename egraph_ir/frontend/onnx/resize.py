"""ONNX Resize as constants and existing ops: along each resized axis the output is a
fixed combination of input positions, so nearest becomes a gather (`take` with constant
indices) and linear / cubic (antialiased too) a product with a constant (out, in) weight
matrix (`dense`). Everything is computed once, at import, from the static shapes; the
products then compile like any other."""

from __future__ import annotations

import math

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from ...types import FLOAT_DTYPES
from .node import Node, converter

MODES = ("nearest", "linear", "cubic")
TRANSFORMS = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_crop_and_resize",
)  # fmt: skip
NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


class _Axis:
    """One resized axis: its sizes, scale and region of interest."""

    def __init__(self, size: int, out: int, scale: float, roi: tuple[float, float]) -> None:
        self.size, self.out, self.scale, self.roi = size, out, scale, roi

    def source(self, transform: str) -> np.ndarray:
        """Each output position's coordinate in the input (ONNX's transformation modes)."""
        x = np.arange(self.out, dtype=np.float64)
        size, out, scale = self.size, self.out, self.scale
        if transform == "asymmetric":
            return x / scale
        if transform == "align_corners":  # the resized length is size * scale, unrounded
            length = size * scale
            return np.zeros_like(x) if out == 1 else x * (size - 1) / (length - 1)
        if transform == "pytorch_half_pixel":
            return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(x)
        if transform == "half_pixel_symmetric":
            adjustment = out / (scale * size)
            offset = size / 2 * (1 - adjustment)
            return offset + (x + 0.5) / scale - 0.5
        if transform == "tf_crop_and_resize":
            start, end = self.roi
            if out == 1:
                return np.full_like(x, 0.5 * (start + end) * (size - 1))
            return start * (size - 1) + x * (end - start) * (size - 1) / (out - 1)
        return (x + 0.5) / scale - 0.5  # half_pixel


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _weights(axis: _Axis, x: np.ndarray, mode: str, a: float, exclude: bool, antialias: bool):
    """The (out, in) matrix of linear or cubic interpolation: taps around each source
    coordinate, the kernel stretched by 1/scale when antialiasing a downscale, taps outside
    the input clamped to its edge (or dropped with exclude_outside), rows summing to 1."""
    stretch = max(1.0, 1.0 / axis.scale) if antialias else 1.0
    reach = (1.0 if mode == "linear" else 2.0) * stretch
    matrix = np.zeros((axis.out, axis.size))
    for j, centre in enumerate(x):
        taps = np.arange(math.floor(centre - reach) + 1, math.ceil(centre + reach), dtype=np.int64)
        distance = (taps - centre) / stretch
        if mode == "linear":
            w = np.maximum(0.0, 1.0 - np.abs(distance))
        else:
            w = _cubic(distance, a)
        inside = (taps >= 0) & (taps < axis.size)
        if exclude:
            w = np.where(inside, w, 0.0)
        total = w.sum()
        if total:
            w = w / total
        np.add.at(matrix[j], np.clip(taps, 0, axis.size - 1), w)
    return matrix


def _nearest(x: np.ndarray, rule: str, size: int) -> np.ndarray:
    if rule == "floor":
        index = np.floor(x)
    elif rule == "ceil":
        index = np.ceil(x)
    else:
        half = (x - np.floor(x)) == 0.5
        index = np.where(
            half, np.floor(x) if rule == "round_prefer_floor" else np.ceil(x), np.round(x)
        )
    return np.clip(index, 0, size - 1).astype(np.int64)


def _choice(n: Node, name: str, default: str, known: tuple[str, ...]) -> str:
    value = n.attr(name, default)
    if value not in known:
        raise FrontendError(f"{name} must be one of {', '.join(known)}, got {value!r}")
    return value


def _axes_of(n: Node, t_ndim: int) -> list[int]:
    axes = n.attr("axes")
    return list(range(t_ndim)) if axes is None else [int(a) % t_ndim for a in axes]


def _plan(n: Node) -> list[_Axis]:
    """Sizes, scales and region of interest of every axis (unresized ones keep scale 1)."""
    t = n.type()
    axes = _axes_of(n, t.ndim)
    scales, sizes, roi = n.const(2), n.const(3), n.const(1)
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if (scales is None) == (sizes is None):
        raise FrontendError("give exactly one of scales and sizes")
    starts, ends = [0.0] * t.ndim, [1.0] * t.ndim
    if roi is not None and np.asarray(roi).size:
        values = np.asarray(roi, dtype=np.float64).reshape(-1)
        for k, axis in enumerate(axes):
            starts[axis], ends[axis] = values[k], values[k + len(axes)]
    out = list(t.shape)
    factor = [1.0] * t.ndim
    if scales is not None:
        for axis, s in zip(axes, np.asarray(scales, np.float64).reshape(-1), strict=True):
            factor[axis], out[axis] = float(s), math.floor(t.shape[axis] * s)
    else:
        wanted = [int(v) for v in np.asarray(sizes).reshape(-1)]
        ratios = [w / t.shape[axis] for axis, w in zip(axes, wanted, strict=True)]
        policy = n.attr("keep_aspect_ratio_policy", "stretch")
        if policy in ("not_larger", "not_smaller"):
            common = min(ratios) if policy == "not_larger" else max(ratios)
            ratios = [common] * len(axes)
            wanted = [math.floor(common * t.shape[axis] + 0.5) for axis in axes]
        elif policy != "stretch":
            raise FrontendError(f"keep_aspect_ratio_policy {policy!r} is not supported")
        for axis, w, r in zip(axes, wanted, ratios, strict=True):
            factor[axis], out[axis] = r, w
    return [_Axis(t.shape[k], out[k], factor[k], (starts[k], ends[k])) for k in range(t.ndim)]


@converter("Resize")
def _resize(n: Node) -> Expr:
    t = n.type()
    mode = _choice(n, "mode", "nearest", MODES)
    transform = _choice(n, "coordinate_transformation_mode", "half_pixel", TRANSFORMS)
    rule = _choice(n, "nearest_mode", "round_prefer_floor", NEAREST)
    if mode != "nearest" and t.dtype not in FLOAT_DTYPES:
        raise FrontendError(f"{mode} resize needs a float input, got {t.dtype}")
    a = float(n.attr("cubic_coeff_a", -0.75))
    exclude, antialias = bool(n.attr("exclude_outside", 0)), bool(n.attr("antialias", 0))
    result, outside = n.x(0), None
    for k, axis in enumerate(_plan(n)):
        if axis.out == axis.size and axis.scale == 1.0 and transform != "tf_crop_and_resize":
            continue
        x = axis.source(transform)
        if transform == "tf_crop_and_resize":  # positions beyond the input: extrapolated
            beyond = (x < 0) | (x > axis.size - 1)
            shape = [1] * t.ndim
            shape[k] = axis.out
            mask = beyond.reshape(shape)
            outside = mask if outside is None else outside | mask
        if mode == "nearest":
            index = Constant(_nearest(x, rule, axis.size))
            result = op.take(result, index, axis=k, mode="fast")
            continue
        matrix = Constant(_weights(axis, x, mode, a, exclude, antialias).astype(t.dtype))
        order = [*(d for d in range(t.ndim) if d != k), k]
        back = [order.index(d) for d in range(t.ndim)]
        moved = op.transpose(result, axes=tuple(order))
        result = op.transpose(op.dense(moved, matrix), axes=tuple(back))
    if outside is not None and outside.any():
        value = Constant(np.asarray(n.attr("extrapolation_value", 0.0), dtype=t.dtype))
        result = op.where(Constant(np.broadcast_to(outside, outside.shape).copy()), value, result)
    return result
