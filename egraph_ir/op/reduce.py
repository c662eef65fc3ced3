"""Reductions over axes, argmax, and softmax/log_softmax."""

from __future__ import annotations

import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, ShapeError, register_op
from ..types import FLOAT_DTYPES, TensorType, Type
from ._common import NUMERIC, TRANSCENDENTAL, norm_axes, norm_axis, per_input_element, require_dtype

REDUCE_ATTRS = (AttrSpec("axis", "axes", None), AttrSpec("keepdims", "bool", False))


def reduced_shape(shape, axis, keepdims) -> tuple[int, ...]:
    axes = norm_axes(axis, len(shape))
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(allowed, needs_elements=False):
    def infer(args: list[TensorType], attrs: Attrs) -> Type:
        t = args[0]
        require_dtype(t, allowed)
        axes = norm_axes(attrs["axis"], t.ndim)
        if needs_elements and any(t.shape[a] == 0 for a in axes):
            raise ShapeError(f"cannot reduce an empty axis of {t.shape}")
        return TensorType(reduced_shape(t.shape, attrs["axis"], attrs["keepdims"]), t.dtype)

    return infer


def _reducer(fn):
    def ref(x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
        axes = norm_axes(axis, x.ndim)
        return np.asarray(fn(x, axis=axes, keepdims=keepdims)).astype(x.dtype, copy=False)

    return ref


for _name, _fn, _allowed, _nonempty in [
    ("sum", np.sum, NUMERIC, False),
    ("mean", np.mean, FLOAT_DTYPES, True),
    ("max", np.max, NUMERIC, True),
    ("min", np.min, NUMERIC, True),
    ("prod", np.prod, NUMERIC, False),
]:
    register_op(
        Op(
            name=_name,
            inputs=("data",),
            infer=_reduce_infer(_allowed, _nonempty),
            reference=_reducer(_fn),
            pattern=OpPattern.COMM_REDUCE,
            flops=per_input_element(1.0),
            attrs=REDUCE_ATTRS,
            doc=f"{_name} over axis (all axes when None)",
        )
    )


def _argmax_infer(args: list[TensorType], attrs: Attrs) -> Type:
    t = args[0]
    require_dtype(t, NUMERIC)
    axis = attrs["axis"]
    axes = None if axis is None else (axis,)
    if any(t.shape[a] == 0 for a in norm_axes(axes, t.ndim)) or t.size == 0:
        raise ShapeError(f"cannot take argmax over an empty axis of {t.shape}")
    return TensorType(reduced_shape(t.shape, axes, attrs["keepdims"]), "int64")


def _argmax_ref(x: np.ndarray, axis: int | None, keepdims: bool) -> np.ndarray:
    if axis is None:
        flat = np.argmax(x.reshape(-1))
        shape = (1,) * x.ndim if keepdims else ()
        return np.asarray(flat, dtype=np.int64).reshape(shape)
    return np.argmax(x, axis=norm_axis(axis, x.ndim), keepdims=keepdims).astype(np.int64)  # type: ignore[call-overload]


register_op(
    Op(
        name="argmax",
        inputs=("data",),
        infer=_argmax_infer,
        reference=_argmax_ref,
        pattern=OpPattern.COMM_REDUCE,
        flops=per_input_element(1.0),
        attrs=(AttrSpec("axis", "int?", None), AttrSpec("keepdims", "bool", False)),
        doc="index (int64) of the first maximum; over the flattened tensor when axis is None",
    )
)


def _softmax_infer(args: list[TensorType], attrs: Attrs) -> Type:
    t = args[0]
    require_dtype(t, FLOAT_DTYPES)
    if t.ndim == 0:  # as in ONNX: the axis must name one of the input's axes
        raise ShapeError("softmax needs a tensor of rank 1 or more, got a scalar")
    norm_axis(attrs["axis"], t.ndim)
    return t


def softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:  # nothing to normalise (numpy's max has no identity)
        return x.copy()
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype)


def log_softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(x.dtype)


for _name, _ref in [("softmax", softmax_ref), ("log_softmax", log_softmax_ref)]:
    register_op(
        Op(
            name=_name,
            inputs=("data",),
            infer=_softmax_infer,
            reference=_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE,  # TVM: takes an elementwise epilogue
            flops=per_input_element(TRANSCENDENTAL + 3),
            attrs=(AttrSpec("axis", "int", -1),),
            doc=f"{_name} along axis (max-subtracted for stability)",
        )
    )
