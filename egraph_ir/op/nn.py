"""Neural-network ops: dense/matmul, conv2d and pooling (normalisations: norm.py).

Layouts are NCHW for data and OIHW for conv weights.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..attrs import Attrs
from ..registry import AttrSpec, OpPattern, ShapeError
from ..types import FLOAT_DTYPES, TensorType, Type
from ._common import (
    NUMERIC,
    broadcast_shapes,
    register_anchor,
    require_dtype,
    same_dtype,
    size_of,
)

FLOATS = FLOAT_DTYPES
_reg = register_anchor


# ---------------------------------------------------------------- dense / matmul / batch_matmul
def _dense_infer(args: list[TensorType], attrs: Attrs) -> Type:
    x, w = args
    dtype = same_dtype(args)
    require_dtype(x, NUMERIC)
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ShapeError(
            f"dense needs data (..., K) and weight (N, K); got {x.shape} and {w.shape}"
        )
    if attrs["units"] is not None and attrs["units"] != w.shape[0]:
        raise ShapeError(f"units={attrs['units']} but weight has {w.shape[0]} rows")
    return TensorType(x.shape[:-1] + (w.shape[0],), dtype)


_reg(
    "dense",
    ("data", "weight"),
    _dense_infer,
    lambda x, w, units: np.matmul(x, w.T),
    lambda a, out, at: 2.0 * size_of(out.shape) * a[0].shape[-1],
    (AttrSpec("units", "int?", None),),
    doc="x · Wᵀ with weight (units, K)",
)


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy.matmul's result shape (1-D operands are promoted and the axis dropped)."""
    if not a or not b:
        raise ShapeError(f"matmul does not take scalars: {a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"inner dimensions differ: {a} and {b}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(args: list[TensorType], attrs: Attrs) -> Type:
    dtype = same_dtype(args)
    require_dtype(args[0], NUMERIC)
    return TensorType(matmul_shape(args[0].shape, args[1].shape), dtype)


_reg(
    "matmul",
    ("a", "b"),
    _matmul_infer,
    np.matmul,
    lambda a, out, at: 2.0 * max(size_of(out.shape), 1) * a[0].shape[-1],
    doc="numpy matmul semantics, including batch broadcasting and 1-D operands",
)


def _bmm_shapes(x, y, ta, tb):
    if len(x) != 3 or len(y) != 3:
        raise ShapeError(f"batch_matmul needs rank-3 operands, got {x} and {y}")
    m, k = (x[2], x[1]) if ta else (x[1], x[2])
    k2, n = (y[2], y[1]) if tb else (y[1], y[2])
    if k != k2:
        raise ShapeError(
            f"inner dimensions differ: {x} and {y} (transpose_a={ta}, transpose_b={tb})"
        )
    batch = broadcast_shapes((x[0],), (y[0],))
    return batch + (m, n), k


def _bmm_infer(args: list[TensorType], attrs: Attrs) -> Type:
    dtype = same_dtype(args)
    require_dtype(args[0], NUMERIC)  # as dense and matmul: no bool products
    shape, _ = _bmm_shapes(args[0].shape, args[1].shape, attrs["transpose_a"], attrs["transpose_b"])
    return TensorType(shape, dtype)


def _bmm_ref(x, y, transpose_a, transpose_b):
    x = np.swapaxes(x, 1, 2) if transpose_a else x
    y = np.swapaxes(y, 1, 2) if transpose_b else y
    return np.matmul(x, y)


_reg(
    "batch_matmul",
    ("x", "y"),
    _bmm_infer,
    _bmm_ref,
    lambda a, out, at: (
        2.0
        * size_of(out.shape)
        * _bmm_shapes(a[0].shape, a[1].shape, at["transpose_a"], at["transpose_b"])[1]
    ),
    (AttrSpec("transpose_a", "bool", False), AttrSpec("transpose_b", "bool", True)),
    doc="batched x · y on rank-3 tensors; y is (B, N, K) by default (Relay)",
)


# ---------------------------------------------------------------- conv2d and pooling helpers
def norm_padding(padding: tuple[int, ...]) -> tuple[int, int, int, int]:
    """1, 2 or 4 non-negative ints to (top, left, bottom, right)."""
    if any(p < 0 for p in padding):
        raise ShapeError(f"padding must not be negative, got {tuple(padding)}")
    if len(padding) == 1:
        return (padding[0],) * 4
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    if len(padding) == 4:
        return tuple(padding)  # type: ignore[return-value]
    raise ShapeError(f"padding must have 1, 2 or 4 values, got {padding}")


def norm_pair(v: tuple[int, ...], what: str) -> tuple[int, int]:
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2 or min(v) < 1:
        raise ShapeError(f"{what} must be 1 or 2 positive ints, got {v}")
    return (v[0], v[1])


def window_out(
    size: int, pad_begin: int, pad_end: int, k: int, stride: int, dilation: int, ceil: bool = False
) -> int:
    """Number of windows along one axis (ONNX/PyTorch rules, including ceil_mode)."""
    span = dilation * (k - 1) + 1
    avail = size + pad_begin + pad_end - span
    if avail < 0:
        raise ShapeError(
            f"window of {span} does not fit in {size} (+{pad_begin + pad_end} padding)"
        )
    out = (-(-avail // stride) if ceil else avail // stride) + 1
    if ceil and (out - 1) * stride >= size + pad_begin:
        out -= 1  # the last window would start in the far padding only
    return out


def conv_geometry(x, w, attrs):
    if len(x) != 4 or len(w) != 4:
        raise ShapeError(f"conv2d needs NCHW data and OIHW weight, got {x} and {w}")
    groups = attrs["groups"]
    if groups < 1 or x[1] % groups or w[0] % groups or x[1] // groups != w[1]:
        raise ShapeError(f"channels do not match: data {x}, weight {w}, groups={groups}")
    pt, pl, pb, pr = norm_padding(attrs["padding"])
    sh, sw = norm_pair(attrs["strides"], "strides")
    dh, dw = norm_pair(attrs["dilation"], "dilation")
    oh = window_out(x[2], pt, pb, w[2], sh, dh)
    ow = window_out(x[3], pl, pr, w[3], sw, dw)
    return (x[0], w[0], oh, ow), (pt, pl, pb, pr), (sh, sw), (dh, dw)


def _conv_infer(args: list[TensorType], attrs: Attrs) -> Type:
    dtype = same_dtype(args)
    require_dtype(args[0], FLOATS)
    out, *_ = conv_geometry(args[0].shape, args[1].shape, attrs)
    return TensorType(out, dtype)


def windows(xp, kh, kw, sh, sw, dh, dw, oh, ow):
    """(N, C, OH, OW, KH, KW) view of the windows of a padded NCHW tensor."""
    win = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]


def conv2d_ref(x, w, strides, padding, dilation, groups):
    (n, o, oh, ow), (pt, pl, pb, pr), (sh, sw), (dh, dw) = conv_geometry(
        x.shape, w.shape, dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    )
    if n * o * oh * ow == 0 or x.size == 0 or w.size == 0:  # an empty axis: sums of nothing
        return np.zeros((n, o, oh, ow), x.dtype)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    cg, og = x.shape[1] // groups, o // groups
    outs = []
    for g in range(groups):
        win = windows(xp[:, g * cg : (g + 1) * cg], w.shape[2], w.shape[3], sh, sw, dh, dw, oh, ow)
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, -1)
        wg = w[g * og : (g + 1) * og].reshape(og, -1)
        outs.append((cols @ wg.T).reshape(n, oh, ow, og).transpose(0, 3, 1, 2))
    return np.concatenate(outs, axis=1).astype(x.dtype)


CONV_ATTRS = (
    AttrSpec("strides", "ints", (1, 1)),
    AttrSpec("padding", "ints", (0, 0, 0, 0)),
    AttrSpec("dilation", "ints", (1, 1)),
    AttrSpec("groups", "int", 1),
)
_reg(
    "conv2d",
    ("data", "weight"),
    _conv_infer,
    conv2d_ref,
    lambda a, out, at: 2.0 * size_of(out.shape) * size_of(a[1].shape[1:]),
    CONV_ATTRS,
    doc="2-D convolution, NCHW data and OIHW weight; padding is (top, left, bottom, right)",
)


def _pool_geometry(x, attrs):
    if len(x) != 4:
        raise ShapeError(f"pooling needs NCHW data, got {x}")
    kh, kw = norm_pair(attrs["pool_size"], "pool_size")
    sh, sw = norm_pair(attrs["strides"], "strides")
    dh, dw = norm_pair(attrs["dilation"], "dilation")
    pt, pl, pb, pr = norm_padding(attrs["padding"])
    if max(pt, pb) >= dh * (kh - 1) + 1 or max(pl, pr) >= dw * (kw - 1) + 1:
        raise ShapeError(f"padding {attrs['padding']} must be smaller than the window")
    oh = window_out(x[2], pt, pb, kh, sh, dh, attrs["ceil_mode"])
    ow = window_out(x[3], pl, pr, kw, sw, dw, attrs["ceil_mode"])
    return (x[0], x[1], oh, ow), (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr)


def _pool_infer(args: list[TensorType], attrs: Attrs) -> Type:
    require_dtype(args[0], FLOATS)
    out, *_ = _pool_geometry(args[0].shape, attrs)
    return TensorType(out, args[0].dtype)


def _max_pool_infer(args: list[TensorType], attrs: Attrs) -> Type:
    """Floats and, as ONNX's MaxPool (opset 12), 8-bit integers: quantised models pool
    their integers (rules/builtin/quantize.rules: qdq-max-pool2d)."""
    require_dtype(args[0], (*FLOATS, "int8", "uint8"))
    out, *_ = _pool_geometry(args[0].shape, attrs)
    return TensorType(out, args[0].dtype)


def _pool_windows(x, fill, attrs):
    """Windows over x padded with fill; extra far-side cells for ceil_mode are filled too."""
    geometry = _pool_geometry(x.shape, attrs)
    (_, _, oh, ow), (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = geometry
    need_h = (oh - 1) * sh + dh * (kh - 1) + 1
    need_w = (ow - 1) * sw + dw * (kw - 1) + 1
    extra_h = max(0, need_h - (x.shape[2] + pt + pb))
    extra_w = max(0, need_w - (x.shape[3] + pl + pr))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + extra_h), (pl, pr + extra_w)), constant_values=fill)
    return windows(xp, kh, kw, sh, sw, dh, dw, oh, ow), (pt, pl, pb, pr), (extra_h, extra_w)


POOL_ATTRS = (
    AttrSpec("pool_size", "ints"),
    AttrSpec("strides", "ints", (1, 1)),
    AttrSpec("padding", "ints", (0, 0, 0, 0)),
    AttrSpec("dilation", "ints", (1, 1)),
    AttrSpec("ceil_mode", "bool", False),
)


def max_pool2d_ref(x, **attrs):
    least = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf  # the padding
    win, _, _ = _pool_windows(x, least, attrs)
    return win.max(axis=(4, 5)).astype(x.dtype)


def avg_pool2d_ref(x, count_include_pad, **attrs):
    win, (pt, pl, pb, pr), (eh, ew) = _pool_windows(x, 0, attrs)
    total = win.sum(axis=(4, 5), dtype=np.float64)
    # count the cells each window covers: real ones, plus explicit padding if asked
    h, w = x.shape[2], x.shape[3]
    ones = np.ones((1, 1, h, w))
    pad_fill = 1.0 if count_include_pad else 0.0
    mask = np.pad(ones, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=pad_fill)
    mask = np.pad(mask, ((0, 0), (0, 0), (0, eh), (0, ew)))
    counts = _windows_like(mask, attrs, x.shape).sum(axis=(4, 5))
    return (total / counts).astype(x.dtype)


def _windows_like(mask, attrs, shape):
    (_, _, oh, ow), (kh, kw), (sh, sw), (dh, dw), _ = _pool_geometry(shape, attrs)
    return windows(mask, kh, kw, sh, sw, dh, dw, oh, ow)


def _pool_flops(a, out, at):
    return float(size_of(out.shape) * size_of(norm_pair(at["pool_size"], "pool_size")))


_reg(
    "max_pool2d",
    ("data",),
    _max_pool_infer,
    max_pool2d_ref,
    _pool_flops,
    POOL_ATTRS,
    doc="max over windows (NCHW); padding never wins",
)
_reg(
    "avg_pool2d",
    ("data",),
    _pool_infer,
    avg_pool2d_ref,
    _pool_flops,
    (*POOL_ATTRS, AttrSpec("count_include_pad", "bool", False)),
    doc="mean over windows (NCHW); count_include_pad counts explicit padding cells",
)


def _gap_infer(args: list[TensorType], attrs: Attrs) -> Type:
    x = args[0]
    require_dtype(x, FLOATS)
    if x.ndim != 4 or x.shape[2] * x.shape[3] == 0:
        raise ShapeError(f"global_avg_pool2d needs non-empty NCHW data, got {x.shape}")
    return TensorType(x.shape[:2] + (1, 1), x.dtype)


_reg(
    "global_avg_pool2d",
    ("data",),
    _gap_infer,
    lambda x: np.mean(x, axis=(2, 3), keepdims=True).astype(x.dtype),
    lambda a, out, at: float(a[0].size),
    pattern=OpPattern.COMM_REDUCE,  # a mean: elementwise producers fuse into its loop
    doc="mean over H and W, keeping them as size 1",
)
