"""Normalisation ops: bias_add, batch/layer/group/instance norm, l2_normalize, dropout.

Layouts are NCHW for data; `axis` names the channel axis."""

from __future__ import annotations

import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, OpPattern, ShapeError
from ..types import FLOAT_DTYPES, TensorType, TupleType, Type
from ._common import (
    NUMERIC,
    TRANSCENDENTAL,
    norm_axes,
    norm_axis,
    per_output_element,
    register_anchor,
    require_dtype,
    same_dtype,
    size_of,
)

FLOATS = FLOAT_DTYPES
_reg = register_anchor


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
