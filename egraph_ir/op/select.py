"""Ops that pick or place elements by computed positions: scatter_elements, scatter_nd,
topk and einsum (ONNX ScatterElements, ScatterND, TopK, Einsum).

They have numpy references and type relations but no loop compute definition: a group
holding one runs through the host fallback (codegen/lower/), so they are opaque.
"""

from __future__ import annotations

import re

import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, ShapeError, register_op
from ..types import NARROW_FLOATS, TensorType, TupleType, Type
from ._common import INTEGER, NUMERIC, norm_axis, per_output_element, require_dtype

REDUCTIONS = ("none", "add", "mul", "max", "min")
_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_elements_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, indices, updates = args
    require_dtype(indices, INTEGER, "indices")
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise ShapeError(
            f"indices {indices.shape} and updates {updates.shape} must have one shape, of "
            f"data's rank {data.ndim}"
        )
    if updates.dtype != data.dtype:
        raise ShapeError(f"updates are {updates.dtype}, data {data.dtype}")
    axis = norm_axis(attrs["axis"], data.ndim)
    for k, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)):
        if (i > d and k != axis) or (k == axis and i > 0 and d == 0):
            raise ShapeError(
                f"indices {indices.shape} reach beyond data {data.shape} on axis {k} "
                "(ONNX: an index tensor no larger than data, except along the axis)"
            )
    return data


def _in_range(indices: np.ndarray, size: int) -> np.ndarray:
    clipped = np.clip(indices.astype(np.int64), -size, size - 1)
    return np.where(clipped < 0, clipped + size, clipped)


def scatter_elements_ref(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str
) -> np.ndarray:
    """out = data; out[..., indices[i], ...] (along axis) = updates[i], or combined with
    the reduction; negative indices count from the end, indices beyond the axis clip to it
    (as `take`'s default mode)."""
    axis %= data.ndim
    out = data.copy()
    index = _in_range(indices, data.shape[axis])
    grid: list[np.ndarray] = list(np.indices(indices.shape, sparse=True))
    grid[axis] = index
    where = tuple(np.broadcast_arrays(*grid))
    if reduction == "none":
        out[where] = updates
    else:
        _UFUNCS[reduction].at(out, where, updates)
    return out


def _scatter_nd_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, indices, updates = args
    require_dtype(indices, INTEGER, "indices")
    k = indices.shape[-1] if indices.ndim else 0
    expected = indices.shape[:-1] + data.shape[k:]
    if indices.ndim == 0 or k > data.ndim or updates.shape != expected:
        raise ShapeError(
            f"updates {updates.shape} must be indices[:-1] + data[k:] = {expected} "
            f"(indices {indices.shape}, data {data.shape})"
        )
    return data


def scatter_nd_ref(
    data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str
) -> np.ndarray:
    out = data.copy()
    if out.size == 0:  # nowhere to write: an index into an empty axis has no place
        return out
    k = indices.shape[-1]
    flat = indices.reshape(-1, k).astype(np.int64)
    rows = updates.reshape(flat.shape[0], *data.shape[k:])
    for position, row in zip(flat, rows, strict=True):
        where = tuple(int(_in_range(p, data.shape[d])) for d, p in enumerate(position))
        if reduction == "none":
            out[where] = row
        else:
            out[where] = _UFUNCS[reduction](out[where], row)
    return out


for _name, _infer, _ref, _inputs, _attrs in (
    ("scatter_elements", _scatter_elements_infer, scatter_elements_ref,
     ("data", "indices", "updates"), (AttrSpec("axis", "int", 0),)),
    ("scatter_nd", _scatter_nd_infer, scatter_nd_ref, ("data", "indices", "updates"), ()),
):  # fmt: skip
    register_op(
        Op(
            name=_name,
            inputs=_inputs,
            infer=_infer,
            reference=_ref,
            pattern=OpPattern.OPAQUE,
            flops=per_output_element(1.0),
            attrs=(*_attrs, AttrSpec("reduction", "str", "none", choices=REDUCTIONS)),
            doc=f"{_name}: data with updates written (or combined) at the indices",
        )
    )


def _topk_infer(args: list[TensorType], attrs: Attrs) -> Type:
    (x,) = args
    require_dtype(x, NUMERIC, "data")
    if x.ndim == 0:
        raise ShapeError("topk of a scalar")
    axis = norm_axis(attrs["axis"], x.ndim)
    k = attrs["k"]
    if not 0 <= k <= x.shape[axis]:
        raise ShapeError(f"k={k} is outside 0..{x.shape[axis]} (axis {axis} of {x.shape})")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1 :]
    return TupleType((TensorType(shape, x.dtype), TensorType(shape, "int64")))


def topk_ref(
    x: np.ndarray, k: int, axis: int, largest: bool, sorted: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest (or smallest) along axis, best first; equal values keep their order
    (the lower index first)."""
    axis %= x.ndim
    n = x.shape[axis]
    if largest:  # a stable ascending sort of the reversed axis, read backwards
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        order = n - 1 - np.flip(order, axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, index, axis=axis), index


register_op(
    Op(
        name="topk",
        inputs=("data",),
        infer=_topk_infer,
        reference=topk_ref,
        pattern=OpPattern.OPAQUE,
        flops=per_output_element(8.0),
        attrs=(
            AttrSpec("k", "int"),
            AttrSpec("axis", "int", -1),
            AttrSpec("largest", "bool", True),
            AttrSpec("sorted", "bool", True),
        ),
        doc="(values, int64 indices) of the k largest or smallest along axis",
    )
)


_EQUATION = re.compile(r"^[a-zA-Z.,]*(->[a-zA-Z.]*)?$")


def einsum_shape(equation: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The result shape of an einsum, from its labels ('...' broadcasts; without '->' the
    output is '...' then the labels used once, in alphabetical order)."""
    equation = equation.replace(" ", "")
    if not _EQUATION.match(equation):
        raise ShapeError(f"einsum equation {equation!r} is not of the form 'ij,jk->ik'")
    inputs, _, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"einsum {equation!r} names {len(terms)} operands, got {len(shapes)}")
    sizes: dict[str, int] = {}
    ellipsis: tuple[int, ...] = ()
    counts: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        labels = term.replace("...", "")
        extra = len(shape) - len(labels)
        if extra < 0 or (extra and "..." not in term):
            raise ShapeError(f"einsum term {term!r} does not fit a tensor of shape {shape}")
        head = term.index("...") if "..." in term else len(labels)
        dims = list(shape[:head]) + list(shape[head + extra :])
        if "..." in term:
            ellipsis = np.broadcast_shapes(ellipsis, tuple(shape[head : head + extra]))
        for label, dim in zip(labels, dims, strict=True):
            counts[label] = counts.get(label, 0) + 1
            if sizes.setdefault(label, dim) != dim and 1 not in (dim, sizes[label]):
                raise ShapeError(f"einsum label {label!r} is {sizes[label]} and {dim}")
            sizes[label] = max(sizes[label], dim)
    if "->" not in equation:
        output = "..." + "".join(sorted(k for k, c in counts.items() if c == 1))
    unknown = set(output.replace("...", "")) - set(sizes)
    if unknown:
        raise ShapeError(f"einsum output labels {sorted(unknown)} name no input axis")
    out: list[int] = []
    rest = output.replace("...", "\0")
    for label in rest:
        out.extend(ellipsis if label == "\0" else (sizes[label],))
    return tuple(out)


def _einsum_infer(args: list[TensorType], attrs: Attrs) -> Type:
    dtype = args[0].dtype
    if any(t.dtype != dtype for t in args):
        raise ShapeError(f"einsum operands differ in dtype: {[t.dtype for t in args]}")
    return TensorType(einsum_shape(attrs["equation"], [t.shape for t in args]), dtype)


def einsum_ref(*xs: np.ndarray, equation: str) -> np.ndarray:
    """numpy's einsum; storage-only floats (bfloat16, ...) are summed in float32."""
    dtype = xs[0].dtype
    if dtype.name in NARROW_FLOATS:
        xs = tuple(x.astype(np.float32) for x in xs)
    return np.asarray(np.einsum(equation.replace(" ", ""), *xs)).astype(dtype)


register_op(
    Op(
        name="einsum",
        inputs=("operands",),
        infer=_einsum_infer,
        reference=einsum_ref,
        pattern=OpPattern.OPAQUE,
        flops=per_output_element(2.0),
        attrs=(AttrSpec("equation", "str"),),
        variadic=True,
        doc="numpy's einsum over the operands (a sum of products named by labels)",
    )
)
