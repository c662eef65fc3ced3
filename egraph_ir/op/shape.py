"""Shape and data-movement ops (injective): reshape, transpose, slicing, gathering, padding."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

from ..attrs import Attrs
from ..dims import Dim, DimLike, divide_exact
from ..registry import AttrSpec, OpPattern, ShapeError
from ..types import NARROW_FLOATS, NARROW_INTS, TensorType, TupleType, Type
from ._common import INTEGER, norm_axis, per_output_element, register_anchor, same_dtype, size_of

MOVE = per_output_element(0.0)


def _reg(name, inputs, infer, ref, attrs=(), pattern=OpPattern.INJECTIVE, doc="", variadic=False):
    register_anchor(name, inputs, infer, ref, MOVE, attrs, pattern, doc, variadic)


# ---------------------------------------------------------------- reshape
def reshape_target(shape: tuple[int, ...], newshape: tuple[int, ...]) -> tuple[int, ...]:
    """Resolve one -1 in newshape; the element count must match (for every size, when
    the shapes are symbolic: entries may be Dims, as in TensorType.shape)."""
    if sum(1 for d in newshape if d == -1) > 1:
        raise ShapeError(f"newshape {newshape} has more than one -1")
    if any(isinstance(d, int) and d < -1 for d in newshape):
        raise ShapeError(f"newshape {newshape} has a negative dimension")
    total = size_of(shape)
    known = size_of([d for d in newshape if d != -1])
    if -1 in newshape:
        inferred = divide_exact(total, known)
        if inferred is None:
            raise ShapeError(f"cannot reshape {shape} to {newshape}")
        newshape = tuple(inferred if d == -1 else d for d in newshape)  # type: ignore[misc]
    if size_of(newshape) != total:
        raise ShapeError(f"cannot reshape {shape} ({total} elements) to {newshape}")
    return newshape


def _reshape_infer(args: list[TensorType], attrs: Attrs) -> Type:
    return TensorType(reshape_target(args[0].shape, attrs["newshape"]), args[0].dtype)


_reg(
    "reshape",
    ("data",),
    _reshape_infer,
    lambda x, newshape: np.reshape(x, reshape_target(x.shape, newshape)),
    (AttrSpec("newshape", "dims"),),
    doc="same elements in row-major order; one -1 is inferred",
)


# ---------------------------------------------------------------- transpose
def transpose_axes(ndim: int, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(ndim)))
    if len(axes) != ndim:
        raise ShapeError(f"axes {axes} do not match rank {ndim}")
    norm = tuple(norm_axis(a, ndim) for a in axes)
    if sorted(norm) != list(range(ndim)):
        raise ShapeError(f"axes {axes} are not a permutation of 0..{ndim - 1}")
    return norm


def _transpose_infer(args: list[TensorType], attrs: Attrs) -> Type:
    t = args[0]
    perm = transpose_axes(t.ndim, attrs["axes"])
    return TensorType(tuple(t.shape[a] for a in perm), t.dtype)


_reg(
    "transpose",
    ("data",),
    _transpose_infer,
    lambda x, axes: np.transpose(x, transpose_axes(x.ndim, axes)),
    (AttrSpec("axes", "ints?", None),),
    doc="permute axes; None reverses them",
)


# ---------------------------------------------------------------- expand_dims / squeeze
def _expand_shape(shape: tuple[int, ...], axis: int, num: int) -> tuple[int, ...]:
    if num < 0:
        raise ShapeError(f"num_newaxis must be >= 0, got {num}")
    axis = norm_axis(axis, len(shape) + 1)
    return shape[:axis] + (1,) * num + shape[axis:]


_reg(
    "expand_dims",
    ("data",),
    lambda a, at: TensorType(_expand_shape(a[0].shape, at["axis"], at["num_newaxis"]), a[0].dtype),
    lambda x, axis, num_newaxis: np.reshape(x, _expand_shape(x.shape, axis, num_newaxis)),
    (AttrSpec("axis", "int"), AttrSpec("num_newaxis", "int", 1)),
    OpPattern.BROADCAST,
    doc="insert num_newaxis size-1 axes at axis",
)


def squeeze_shape(shape: tuple[int, ...], axis: tuple[int, ...] | None) -> tuple[int, ...]:
    if axis is None:
        return tuple(d for d in shape if d != 1)
    norm = {norm_axis(a, len(shape)) for a in axis}
    for a in norm:
        if shape[a] != 1:
            raise ShapeError(f"cannot squeeze axis {a} of size {shape[a]} in {shape}")
    return tuple(d for i, d in enumerate(shape) if i not in norm)


_reg(
    "squeeze",
    ("data",),
    lambda a, at: TensorType(squeeze_shape(a[0].shape, at["axis"]), a[0].dtype),
    lambda x, axis: np.reshape(x, squeeze_shape(x.shape, axis)),
    (AttrSpec("axis", "axes", None),),
    doc="drop size-1 axes (all when axis is None)",
)


# ---------------------------------------------------------------- broadcast_to
def _broadcast_to_infer(args: list[TensorType], attrs: Attrs) -> Type:
    shape = attrs["shape"]
    src = args[0].shape
    ok = len(src) <= len(shape) and all(
        s in (1, d) for s, d in zip(reversed(src), reversed(shape), strict=False)
    )
    if not ok:
        raise ShapeError(f"cannot broadcast {src} to {shape}")
    return TensorType(shape, args[0].dtype)


_reg(
    "broadcast_to",
    ("data",),
    _broadcast_to_infer,
    lambda x, shape: np.broadcast_to(x, shape).copy(),
    (AttrSpec("shape", "dims"),),
    OpPattern.BROADCAST,
)


# ---------------------------------------------------------------- concatenate / split
def _concat_infer(args: list[TensorType], attrs: Attrs) -> Type:
    dtype = same_dtype(args)
    first = args[0]
    if first.ndim == 0:
        raise ShapeError("cannot concatenate scalars")
    axis = norm_axis(attrs["axis"], first.ndim)
    for t in args[1:]:
        same_rest = t.ndim == first.ndim and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if i != axis
        )
        if not same_rest:
            raise ShapeError(f"shapes {first.shape} and {t.shape} differ outside axis {axis}")
    total = sum(t.shape[axis] for t in args)
    return TensorType(first.shape[:axis] + (total,) + first.shape[axis + 1 :], dtype)


_reg(
    "concatenate",
    ("data",),
    _concat_infer,
    lambda *xs, axis: np.concatenate(xs, axis=axis),
    (AttrSpec("axis", "int", 0),),
    doc="join one or more tensors along axis",
    variadic=True,
)


def split_bounds(dim: int, sections: int | tuple[int, ...]) -> list[tuple[int, int]]:
    """(start, stop) of each piece: an int is a count of equal parts, a tuple split indices."""
    if isinstance(sections, int):
        if sections <= 0 or dim % sections:
            raise ShapeError(f"cannot split a dimension of {dim} into {sections} equal parts")
        step = dim // sections
        return [(i * step, (i + 1) * step) for i in range(sections)]
    cuts = [0, *sections, dim]
    if any(b < a for a, b in itertools.pairwise(cuts)) or cuts[-2] > dim:
        raise ShapeError(f"split indices {sections} are not increasing within {dim}")
    return list(itertools.pairwise(cuts))


def _split_infer(args: list[TensorType], attrs: Attrs) -> Type:
    t = args[0]
    axis = norm_axis(attrs["axis"], t.ndim)
    parts = split_bounds(t.shape[axis], attrs["indices_or_sections"])
    return TupleType(
        tuple(
            TensorType(t.shape[:axis] + (b - a,) + t.shape[axis + 1 :], t.dtype) for a, b in parts
        )
    )


def _split_ref(x: np.ndarray, indices_or_sections, axis: int) -> tuple[np.ndarray, ...]:
    axis = axis % x.ndim
    bounds = split_bounds(x.shape[axis], indices_or_sections)
    return tuple(np.take(x, np.arange(a, b), axis=axis) for a, b in bounds)


_reg(
    "split",
    ("data",),
    _split_infer,
    _split_ref,
    (AttrSpec("indices_or_sections", "int|ints"), AttrSpec("axis", "int", 0)),
    doc="a tuple of pieces: an int is a number of equal parts, a tuple split indices",
)


# ---------------------------------------------------------------- strided_slice
def slice_spec(shape, begin, end, strides, axes) -> list[slice]:
    """Python-style slices per axis; negative indices wrap and out-of-range ends are clamped."""
    ndim = len(shape)
    axes = tuple(range(len(begin))) if axes is None else axes
    strides = (1,) * len(begin) if strides is None else strides
    if not len(begin) == len(end) == len(axes) or len(strides) != len(begin):
        raise ShapeError(
            f"begin {begin}, end {end}, strides {strides}, axes {axes} differ in length"
        )
    out = [slice(None)] * ndim
    for b, e, s, a in zip(begin, end, strides, axes, strict=True):
        if s == 0:
            raise ShapeError("slice stride 0")
        out[norm_axis(a, ndim)] = slice(b, e, s)
    return out


def _slice_infer(args: list[TensorType], attrs: Attrs) -> Type:
    t = args[0]
    sl = slice_spec(t.shape, attrs["begin"], attrs["end"], attrs["strides"], attrs["axes"])
    shape = tuple(_slice_extent(s, d) for s, d in zip(sl, t.shape, strict=True))
    return TensorType(shape, t.dtype)  # type: ignore[arg-type]  # Dims allowed


def _slice_extent(s: slice, dim: DimLike) -> DimLike:
    """How many elements a slice keeps. With sizes in it (x[:seq] of a table of 512 rows,
    x[-1:] of a symbolic axis) only steps of 1 are decided: a bound that is a size is
    taken to lie within the axis, as the exporter's shape code ensures; negative numbers
    count from the end, and an end past a symbolic axis stops at it."""
    values = (s.start, s.stop, s.step, dim)
    if all(isinstance(v, int) or v is None for v in values):
        return len(range(*s.indices(dim)))
    begin, end = symbolic_bounds(s, dim)
    return end - begin


def symbolic_bounds(s: slice, dim: DimLike) -> tuple[DimLike, DimLike]:
    """Where a slice of step 1 with sizes in it (or of a symbolic axis) begins and ends
    (see _slice_extent)."""
    if s.step not in (None, 1):
        raise ShapeError(f"a slice of step {s.step} with sizes in it ({s}, axis {dim})")

    def place(v: DimLike | None, default: DimLike) -> DimLike:
        if v is None:
            return default
        if isinstance(v, int) and v < 0:
            return dim + v
        if isinstance(v, int) and (v >= 2**31 if isinstance(dim, Dim) else v > dim):
            return dim  # INT64_MAX and other ends past the axis: to its end
        return v

    return place(s.start, 0), place(s.stop, dim)


_reg(
    "strided_slice",
    ("data",),
    _slice_infer,
    lambda x, begin, end, strides, axes: x[tuple(slice_spec(x.shape, begin, end, strides, axes))],
    (
        AttrSpec("begin", "dims"),
        AttrSpec("end", "dims"),
        AttrSpec("strides", "ints?", None),
        AttrSpec("axes", "ints?", None),
    ),
    doc="x[begin:end:strides] on the given axes (all leading axes when None)",
)


# ---------------------------------------------------------------- take
def _take_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, idx = args
    if idx.dtype not in INTEGER:
        raise ShapeError(f"indices must be integers, got {idx.dtype}")
    if attrs["axis"] is None:
        if data.size == 0 and idx.size:
            raise ShapeError("cannot take from an empty tensor")
        return TensorType(idx.shape, data.dtype)
    axis = norm_axis(attrs["axis"], data.ndim)
    if data.shape[axis] == 0:
        raise ShapeError("cannot take from an empty axis")
    return TensorType(data.shape[:axis] + idx.shape + data.shape[axis + 1 :], data.dtype)


def index_in_mode(indices: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Indices into a dimension of n, as int64 in [0, n): `clip` clamps, `wrap` wraps,
    `fast` counts negatives from the end (numpy, ONNX) and does not check the rest, as in
    TVM: an index still out of range is clamped, here and in compiled code alike, so it
    never reads outside the tensor (take, gather_elements)."""
    idx = indices.astype(np.int64)
    if mode == "clip":
        return np.clip(idx, 0, n - 1)
    if mode == "wrap":
        return np.mod(idx, n)
    return np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1)


def _take_ref(data: np.ndarray, indices: np.ndarray, axis: int | None, mode: str) -> np.ndarray:
    if axis is None:
        data, axis = data.reshape(-1), 0
    return np.take(data, index_in_mode(indices, data.shape[axis], mode), axis=axis)


_reg(
    "take",
    ("data", "indices"),
    _take_infer,
    _take_ref,
    (AttrSpec("axis", "int?", None), AttrSpec("mode", "str", "clip", ("clip", "wrap", "fast"))),
    doc="gather along axis (flattened when None); mode clip clamps, wrap wraps, fast follows "
    "numpy (negative counts from the end, out of range is an error)",
)


def _gather_elements_infer(args: list[TensorType], attrs: Attrs) -> Type:
    data, idx = args
    if idx.dtype not in INTEGER:
        raise ShapeError(f"indices must be integers, got {idx.dtype}")
    if data.ndim != idx.ndim or data.ndim == 0:
        raise ShapeError(f"data {data.shape} and indices {idx.shape} need the same rank >= 1")
    axis = norm_axis(attrs["axis"], data.ndim)
    if data.shape[axis] == 0 and size_of(idx.shape):
        raise ShapeError("cannot gather from an empty axis")
    for k, (d, i) in enumerate(zip(data.shape, idx.shape, strict=True)):
        if k != axis and i > d:
            raise ShapeError(f"indices {idx.shape} exceed data {data.shape} on axis {k}")
    return TensorType(idx.shape, data.dtype)


def _gather_elements_ref(data: np.ndarray, indices: np.ndarray, axis: int, mode: str) -> np.ndarray:
    axis = axis % data.ndim
    idx = index_in_mode(indices, data.shape[axis], mode)
    window = tuple(slice(0, d) if k != axis else slice(None) for k, d in enumerate(idx.shape))
    return np.take_along_axis(data[window], idx, axis=axis)


_reg(
    "gather_elements",
    ("data", "indices"),
    _gather_elements_infer,
    _gather_elements_ref,
    (AttrSpec("axis", "int", 0), AttrSpec("mode", "str", "clip", ("clip", "wrap", "fast"))),
    doc="out[i][j][k] = data[i][indices[i][j][k]][k] on axis (ONNX GatherElements); modes as take",
)


# ---------------------------------------------------------------- pad
def _pad_infer(args: list[TensorType], attrs: Attrs) -> Type:
    t = args[0]
    width = attrs["pad_width"]
    if len(width) != t.ndim or any(b < 0 or a < 0 for b, a in width):
        raise ShapeError(
            f"pad_width {width} must give (before, after) >= 0 for each of {t.ndim} axes"
        )
    if attrs["pad_mode"] == "reflect" and any(
        max(b, a) >= d for (b, a), d in zip(width, t.shape, strict=True)
    ):
        raise ShapeError(f"reflect padding {width} must be smaller than the shape {t.shape}")
    if attrs["pad_mode"] != "constant" and any(
        d == 0 and b + a > 0 for (b, a), d in zip(width, t.shape, strict=True)
    ):
        raise ShapeError(
            f"{attrs['pad_mode']} padding {width} widens an empty axis of {t.shape}: "
            "there is no value to repeat (use constant padding)"
        )
    value = attrs["pad_value"]
    if attrs["pad_mode"] == "constant" and not _representable(value, t.dtype):
        raise ShapeError(f"pad_value {value} is not a {t.dtype} value")
    return TensorType(tuple(d + b + a for d, (b, a) in zip(t.shape, width, strict=True)), t.dtype)


def _representable(value: float, dtype: str) -> bool:
    """Can `value` be stored in `dtype` without rounding or overflow (floats: any value)?"""
    kind = np.dtype(dtype).kind
    if kind == "f" or dtype in NARROW_FLOATS:
        return True
    if kind == "b":
        return value in (0.0, 1.0)
    info = ml_dtypes.iinfo(dtype) if dtype in NARROW_INTS else np.iinfo(dtype)
    return float(value).is_integer() and info.min <= value <= info.max


def _pad_ref(x: np.ndarray, pad_width, pad_value: float, pad_mode: str) -> np.ndarray:
    if x.ndim == 0:
        return x.copy()  # nothing to pad (numpy rejects an empty pad_width)
    if pad_mode == "constant":
        return np.pad(x, pad_width, mode="constant", constant_values=x.dtype.type(pad_value))
    return np.pad(x, pad_width, mode=pad_mode)  # type: ignore[call-overload]


_reg(
    "pad",
    ("data",),
    _pad_infer,
    _pad_ref,
    (
        AttrSpec("pad_width", "pairs"),
        AttrSpec("pad_value", "float", 0.0),
        AttrSpec("pad_mode", "str", "constant", ("constant", "edge", "reflect")),
    ),
    doc="pad each axis by (before, after)",
)


# ---------------------------------------------------------------- flatten
def flatten_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    """ONNX Flatten: axis in [-rank, rank]; a negative axis counts from the end (-1 keeps
    the last dimension as the columns)."""
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise ShapeError(f"axis {axis} out of range for rank {rank} (allowed -{rank} to {rank})")
    axis = axis + rank if axis < 0 else axis
    return size_of(shape[:axis]), size_of(shape[axis:])


_reg(
    "flatten",
    ("data",),
    lambda a, at: TensorType(flatten_shape(a[0].shape, at["axis"]), a[0].dtype),
    lambda x, axis: np.reshape(x, flatten_shape(x.shape, axis)),
    (AttrSpec("axis", "int", 1),),
    doc="2-D: axes before axis become rows, the rest columns (ONNX Flatten)",
)
