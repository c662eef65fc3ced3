"""Neural-network ops: dense/matmul, conv2d, pooling, bias, normalisations, dropout.

Layouts are NCHW for data and OIHW for conv weights.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, ShapeError, register_op
from ..types import FLOAT_DTYPES, TensorType, TupleType, Type
from ._common import (
    NUMERIC,
    TRANSCENDENTAL,
    broadcast_shapes,
    norm_axes,
    norm_axis,
    per_output_element,
    require_dtype,
    same_dtype,
    size_of,
)

FLOATS = FLOAT_DTYPES


def _reg(name, inputs, infer, ref, flops, attrs=(), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, doc=""):
    register_op(
        Op(
            name=name,
            inputs=inputs,
            infer=infer,
            reference=ref,
            pattern=pattern,
            flops=flops,
            attrs=attrs,
            doc=doc,
        )
    )


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


def _conv_geometry(x, w, attrs):
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
    out, *_ = _conv_geometry(args[0].shape, args[1].shape, attrs)
    return TensorType(out, dtype)


def _windows(xp, kh, kw, sh, sw, dh, dw, oh, ow):
    """(N, C, OH, OW, KH, KW) view of the windows of a padded NCHW tensor."""
    win = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :oh, :ow]


def conv2d_ref(x, w, strides, padding, dilation, groups):
    (n, o, oh, ow), (pt, pl, pb, pr), (sh, sw), (dh, dw) = _conv_geometry(
        x.shape, w.shape, dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    )
    if n * o * oh * ow == 0 or x.size == 0 or w.size == 0:  # an empty axis: sums of nothing
        return np.zeros((n, o, oh, ow), x.dtype)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    cg, og = x.shape[1] // groups, o // groups
    outs = []
    for g in range(groups):
        win = _windows(xp[:, g * cg : (g + 1) * cg], w.shape[2], w.shape[3], sh, sw, dh, dw, oh, ow)
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


def _pool_windows(x, fill, attrs):
    """Windows over x padded with fill; extra far-side cells for ceil_mode are filled too."""
    geometry = _pool_geometry(x.shape, attrs)
    (_, _, oh, ow), (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = geometry
    need_h = (oh - 1) * sh + dh * (kh - 1) + 1
    need_w = (ow - 1) * sw + dw * (kw - 1) + 1
    extra_h = max(0, need_h - (x.shape[2] + pt + pb))
    extra_w = max(0, need_w - (x.shape[3] + pl + pr))
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + extra_h), (pl, pr + extra_w)), constant_values=fill)
    return _windows(xp, kh, kw, sh, sw, dh, dw, oh, ow), (pt, pl, pb, pr), (extra_h, extra_w)


POOL_ATTRS = (
    AttrSpec("pool_size", "ints"),
    AttrSpec("strides", "ints", (1, 1)),
    AttrSpec("padding", "ints", (0, 0, 0, 0)),
    AttrSpec("dilation", "ints", (1, 1)),
    AttrSpec("ceil_mode", "bool", False),
)


def max_pool2d_ref(x, **attrs):
    win, _, _ = _pool_windows(x, -np.inf, attrs)
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
    return _windows(mask, kh, kw, sh, sw, dh, dw, oh, ow)


def _pool_flops(a, out, at):
    return float(size_of(out.shape) * size_of(norm_pair(at["pool_size"], "pool_size")))


_reg(
    "max_pool2d",
    ("data",),
    _pool_infer,
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
    doc="mean over H and W, keeping them as size 1",
)


# ---------------------------------------------------------------- bias_add
def _channel_vector(data: TensorType, vec: TensorType, axis: int, what: str) -> int:
    ax = norm_axis(axis, data.ndim)
    if vec.shape != (data.shape[ax],):
        raise ShapeError(
            f"{what} must have shape ({data.shape[ax]},) for axis {axis} of "
            f"{data.shape}, got {vec.shape}"
        )
    return ax


def _bias_add_infer(args: list[TensorType], attrs: Attrs) -> Type:
    dtype = same_dtype(args)
    require_dtype(args[0], NUMERIC)
    _channel_vector(args[0], args[1], attrs["axis"], "bias")
    return TensorType(args[0].shape, dtype)


def along(vec: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """Reshape a 1-D vector so it broadcasts along `axis` of a rank-ndim tensor."""
    shape = [1] * ndim
    shape[axis % ndim] = vec.shape[0]
    return vec.reshape(shape)


_reg(
    "bias_add",
    ("data", "bias"),
    _bias_add_infer,
    lambda x, b, axis: (x + along(b, axis, x.ndim)).astype(x.dtype),
    per_output_element(1.0),
    (AttrSpec("axis", "int", 1),),
    OpPattern.BROADCAST,
    doc="add a 1-D bias along axis",
)


# ---------------------------------------------------------------- normalisations
NORM_FLAGS = (
    AttrSpec("epsilon", "float", 1e-5),
    AttrSpec("center", "bool", True),
    AttrSpec("scale", "bool", True),
)


def _affine(y, gamma, beta, axis, center, scale):
    if scale:
        y = y * along(gamma, axis, y.ndim)
    if center:
        y = y + along(beta, axis, y.ndim)
    return y


def _batch_norm_infer(args: list[TensorType], attrs: Attrs) -> Type:
    x = args[0]
    require_dtype(x, FLOATS)
    same_dtype(args)
    for vec, what in zip(args[1:], ("gamma", "beta", "moving_mean", "moving_var"), strict=True):
        _channel_vector(x, vec, attrs["axis"], what)
    return TupleType((x, args[3], args[4]))


def batch_norm_ref(x, gamma, beta, mean, var, axis, epsilon, center, scale):
    t = x.dtype.type
    y = (x - along(mean, axis, x.ndim)) / np.sqrt(along(var, axis, x.ndim) + t(epsilon))
    return (_affine(y, gamma, beta, axis, center, scale).astype(x.dtype), mean, var)


_reg(
    "batch_norm",
    ("data", "gamma", "beta", "moving_mean", "moving_var"),
    _batch_norm_infer,
    batch_norm_ref,
    per_output_element(4.0),
    (AttrSpec("axis", "int", 1), *NORM_FLAGS),
    OpPattern.OPAQUE,
    doc="inference batch norm; a tuple (out, moving_mean, moving_var) as in Relay",
)


def _moments_norm(x, axes, epsilon):
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean(np.square(x - mean), axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + x.dtype.type(epsilon))


def _layer_norm_infer(args: list[TensorType], attrs: Attrs) -> Type:
    x = args[0]
    require_dtype(x, FLOATS)
    same_dtype(args)
    for vec, what in zip(args[1:], ("gamma", "beta"), strict=True):
        _channel_vector(x, vec, attrs["axis"], what)
    return x


def layer_norm_ref(x, gamma, beta, axis, epsilon, center, scale):
    y = _moments_norm(x, (axis % x.ndim,), epsilon)
    return _affine(y, gamma, beta, axis, center, scale).astype(x.dtype)


_reg(
    "layer_norm",
    ("data", "gamma", "beta"),
    _layer_norm_infer,
    layer_norm_ref,
    per_output_element(8.0),
    (AttrSpec("axis", "int", -1), *NORM_FLAGS),
    OpPattern.OPAQUE,
    doc="normalise over one axis, then scale by gamma and shift by beta along it",
)


def _group_norm_infer(args: list[TensorType], attrs: Attrs) -> Type:
    x = _layer_norm_infer(args, attrs)
    assert isinstance(x, TensorType)
    groups = attrs["num_groups"]
    axis = norm_axis(attrs["axis"], x.ndim)
    if x.ndim < 2 or axis == 0:
        raise ShapeError(
            f"group_norm needs (batch, ..., channels, ...) data with the channel axis after "
            f"the batch axis; got rank {x.ndim} and axis {attrs['axis']}"
        )
    channels = x.shape[axis]
    if groups < 1 or channels % groups:
        raise ShapeError(f"{channels} channels cannot form {groups} groups")
    return x


def group_norm_ref(x, gamma, beta, num_groups, axis, epsilon, center, scale):
    axis = axis % x.ndim
    moved = np.moveaxis(x, axis, 1)
    shape = moved.shape
    grouped = moved.reshape((shape[0], num_groups, size_of(shape[1:]) // num_groups))
    y = _moments_norm(grouped, (2,), epsilon).reshape(shape)
    y = np.moveaxis(y, 1, axis)
    return _affine(y, gamma, beta, axis, center, scale).astype(x.dtype)


_reg(
    "group_norm",
    ("data", "gamma", "beta"),
    _group_norm_infer,
    group_norm_ref,
    per_output_element(8.0),
    (AttrSpec("num_groups", "int"), AttrSpec("axis", "int", 1), *NORM_FLAGS),
    OpPattern.OPAQUE,
    doc="normalise each group of channels over the group and all non-batch axes",
)


def instance_norm_ref(x, gamma, beta, axis, epsilon, center, scale):
    axis = axis % x.ndim
    axes = tuple(i for i in range(1, x.ndim) if i != axis)
    y = _moments_norm(x, axes, epsilon)
    return _affine(y, gamma, beta, axis, center, scale).astype(x.dtype)


def _instance_norm_infer(args: list[TensorType], attrs: Attrs) -> Type:
    x = _layer_norm_infer(args, attrs)
    assert isinstance(x, TensorType)
    if x.ndim < 3:
        raise ShapeError(f"instance_norm needs a batch, a channel and spatial axes, got {x.shape}")
    return x


_reg(
    "instance_norm",
    ("data", "gamma", "beta"),
    _instance_norm_infer,
    instance_norm_ref,
    per_output_element(8.0),
    (AttrSpec("axis", "int", 1), *NORM_FLAGS),
    OpPattern.OPAQUE,
    doc="normalise each (batch, channel) over the spatial axes",
)


def _l2_infer(args: list[TensorType], attrs: Attrs) -> Type:
    require_dtype(args[0], FLOATS)
    norm_axes(attrs["axis"], args[0].ndim)
    return args[0]


def l2_normalize_ref(x, eps, axis):
    axes = norm_axes(axis, x.ndim)
    sq = np.sum(x * x, axis=axes, keepdims=True)
    return (x / np.sqrt(np.maximum(sq, x.dtype.type(eps)))).astype(x.dtype)


_reg(
    "l2_normalize",
    ("data",),
    _l2_infer,
    l2_normalize_ref,
    per_output_element(3.0 + TRANSCENDENTAL / 8),
    (AttrSpec("eps", "float", 1e-12), AttrSpec("axis", "axes", None)),
    OpPattern.OPAQUE,
    doc="x / sqrt(max(sum(x², axis), eps))",
)


def _dropout_infer(args: list[TensorType], attrs: Attrs) -> Type:
    require_dtype(args[0], FLOATS)
    if not 0.0 <= attrs["rate"] < 1.0:
        raise ShapeError(f"dropout rate must be in [0, 1), got {attrs['rate']}")
    return TupleType((args[0], args[0]))


_reg(
    "dropout",
    ("data",),
    _dropout_infer,
    lambda x, rate: (x, np.ones_like(x)),
    per_output_element(0.0),
    (AttrSpec("rate", "float", 0.5),),
    OpPattern.OPAQUE,
    doc="inference dropout: a tuple (data, mask of ones) as in Relay",
)
