"""Converters of ops that create, move or select elements: Constant, Shape, Size, Reshape,
Flatten, Transpose, (Un)Squeeze, Concat, Split, Slice, Gather(Elements, ND), Expand, Pad,
Range, Trilu, Tile, EyeLike, OneHot, ReverseSequence, Scatter(Elements, ND) and TopK."""

from __future__ import annotations

import math

import numpy as np

from ... import op
from ...dims import is_static
from ...errors import FrontendError
from ...expr import Constant, Expr, TupleGetItem
from .node import Node, axes_of, converter, scalar
from .sizes import dims_of


@converter("Constant")
def _constant(n: Node) -> Expr:
    for key, dtype in (("value", None), ("value_float", "float32"), ("value_floats", "float32"),
                       ("value_int", "int64"), ("value_ints", "int64")):  # fmt: skip
        if key in n.attrs:
            return Constant(np.asarray(n.attrs[key], dtype=dtype))
    raise FrontendError(f"Constant with attributes {sorted(n.attrs)} is not supported")


@converter("Shape")
def _shape(n: Node) -> Expr:
    """Of a static shape (Shape of a symbolic one is shape arithmetic: sizes.py)."""
    shape = n.type().shape
    start, end = n.attr("start", 0), n.attr("end", None)
    return Constant(np.asarray(shape[start:end], dtype=np.int64))


@converter("Size")
def _size(n: Node) -> Expr:
    return Constant(np.asarray(int(np.prod(n.type().shape)), dtype=np.int64))


@converter("Reshape")
def _reshape(n: Node) -> Expr:
    t = n.type()
    shape = dims_of(n.const(1))
    if not n.attr("allowzero", 0):
        shape = [t.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return op.reshape(n.x(), newshape=tuple(shape))


@converter("Flatten")
def _flatten(n: Node) -> Expr:
    return op.flatten(n.x(), axis=int(n.attr("axis", 1)))


@converter("Transpose")
def _transpose(n: Node) -> Expr:
    perm = n.attr("perm")
    return op.transpose(n.x(), axes=tuple(perm) if perm is not None else None)


@converter("Unsqueeze")
def _unsqueeze(n: Node) -> Expr:
    t = n.type()
    axes = axes_of(n, 1) or []
    rank = t.ndim + len(axes)
    if any(not -rank <= a < rank for a in axes):
        raise FrontendError(f"axes {axes} out of range for rank {rank}")
    where = sorted({a % rank for a in axes})
    if len(where) != len(axes):
        raise FrontendError(f"axes {axes} repeat an axis")
    dims = iter(t.shape)
    shape = tuple(1 if i in where else next(dims) for i in range(rank))
    return op.reshape(n.x(), newshape=shape)


@converter("Squeeze")
def _squeeze(n: Node) -> Expr:
    axes = axes_of(n, 1)
    return op.squeeze(n.x(), axis=tuple(axes) if axes is not None else None)


@converter("Concat")
def _concat(n: Node) -> Expr:
    """Parts of no extent along the axis are left out (a decoder's first step joins its
    empty cache to the new rows: a group touching an empty tensor runs on the host)."""
    axis = int(n.attr("axis"))
    parts = n.inputs()
    kept = [x for i, x in enumerate(parts) if n.type(i).shape[axis] != 0] or parts[:1]
    return kept[0] if len(kept) == 1 else op.concatenate(*kept, axis=axis)


@converter("Split")
def _split(n: Node) -> list[Expr]:
    t = n.type()
    axis = int(n.attr("axis", 0))
    sizes = n.const(1)
    if sizes is None and "split" in n.attrs:
        sizes = n.attrs["split"]
    outputs = len(n.proto.output)
    if sizes is None:
        dim = t.shape[axis]
        step = -(-dim // outputs)  # ONNX: the last piece may be smaller
        sizes = [min(step, dim - i * step) for i in range(outputs)]
    cuts = tuple(int(c) for c in np.cumsum(np.asarray(sizes, dtype=np.int64))[:-1])
    parts = op.split(n.x(), indices_or_sections=cuts, axis=axis)
    return [TupleGetItem(parts, i) for i in range(outputs)]


@converter("Slice")
def _slice(n: Node) -> Expr:
    starts = dims_of(n.const(1))
    ends = dims_of(n.const(2))
    axes = n.const(3)
    steps = n.const(4)
    return op.strided_slice(
        n.x(),
        begin=tuple(starts),
        end=tuple(ends),
        strides=tuple(int(v) for v in steps) if steps is not None else None,
        axes=tuple(int(v) for v in axes) if axes is not None else None,
    )


@converter("Gather")
def _gather(n: Node) -> Expr:
    indices = n.x(1)
    if isinstance(indices, Constant):
        dim = n.type().shape[int(n.attr("axis", 0))]
        indices = Constant(np.where(indices.data < 0, indices.data + dim, indices.data))
    return op.take(n.x(), indices, axis=int(n.attr("axis", 0)), mode="fast")


@converter("GatherElements")
def _gather_elements(n: Node) -> Expr:
    return op.gather_elements(n.x(0), n.x(1), axis=int(n.attr("axis", 0)), mode="fast")


@converter("ConstantOfShape")
def _constant_of_shape(n: Node) -> Expr:
    shape = tuple(dims_of(n.const(0)))
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise FrontendError(f"negative dimension in shape {list(shape)}")
    value = n.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1:
        raise FrontendError(f"value must hold one element, got {fill.size}")
    if not is_static(shape):  # sizes known when the program runs
        return op.full(fill_value=float(fill[0]), shape=shape, dtype=str(fill.dtype))
    return Constant(np.full(shape, fill[0], dtype=fill.dtype))


@converter("Expand")
def _expand(n: Node) -> Expr:
    t = n.type()
    target = tuple(dims_of(n.const(1)))
    ndim = max(len(target), t.ndim)
    a = (1,) * (ndim - t.ndim) + t.shape
    b = (1,) * (ndim - len(target)) + target
    shape = tuple(x if y == 1 else y for x, y in zip(a, b, strict=True))
    return op.broadcast_to(n.x(), shape=shape)


@converter("Pad")
def _pad(n: Node) -> Expr:
    t = n.type()
    pads = [int(p) for p in n.const(1)]
    value = n.const(2)
    axes = n.const(3)
    axes_list = [int(a) % t.ndim for a in axes] if axes is not None else list(range(t.ndim))
    k = len(axes_list)
    width = [(0, 0)] * t.ndim
    for j, a in enumerate(axes_list):
        width[a] = (pads[j], pads[j + k])
    mode = n.attr("mode", "constant")
    pad_value = float(np.asarray(value).reshape(-1)[0]) if value is not None else 0.0
    return op.pad(n.x(), pad_width=tuple(width), pad_value=pad_value, pad_mode=mode)


@converter("Range")
def _range(n: Node) -> Expr:
    given = [n.const(i) for i in range(3)]
    if any(v is None for v in given):
        raise FrontendError("start, limit and delta are required")
    start, limit, delta = (np.asarray(v).reshape(()) for v in given)  # scalars, or 1 value
    if start.dtype == object or limit.dtype == object:  # bounds that are sizes
        dtype = str(n.type(0).dtype)
        return op.arange(start=start.item(), stop=limit.item(), step=int(delta), dtype=dtype)
    if float(delta) == 0:
        raise FrontendError("delta must not be 0")
    count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    values = start + np.arange(count, dtype=start.dtype) * delta  # ONNX: start + i * delta
    return Constant(values.astype(start.dtype))


@converter("Trilu")
def _trilu(n: Node) -> Expr:
    t = n.type()
    if t.ndim < 2:
        raise FrontendError(f"Trilu needs rank >= 2, got {t.ndim}")
    k = int(np.asarray(n.const(1, 0)).reshape(-1)[0]) if n.input(1) is not None else 0
    rows, cols = t.shape[-2:]
    band = np.triu if n.attr("upper", 1) else np.tril
    keep = band(np.ones((rows, cols), dtype=bool), k)
    return op.where(Constant(keep), n.x(), Constant(np.zeros((), dtype=t.dtype)))


@converter("Tile")
def _tile(n: Node) -> Expr:
    """x (a, b) tiled (r, s): x as (1, a, 1, b), broadcast to (r, a, s, b), reshaped."""
    t = n.type()
    repeats = [int(r) for r in np.asarray(n.const(1)).reshape(-1)]
    if len(repeats) != t.ndim or any(r < 0 for r in repeats):
        raise FrontendError(f"repeats {repeats} must give one count >= 0 per axis of {t}")
    spread = tuple(d for size in t.shape for d in (1, size))
    target = tuple(d for r, size in zip(repeats, t.shape, strict=True) for d in (r, size))
    tiled = op.broadcast_to(op.reshape(n.x(), spread), target)
    return op.reshape(tiled, tuple(r * size for r, size in zip(repeats, t.shape, strict=True)))


@converter("EyeLike")
def _eye_like(n: Node) -> Expr:
    t = n.type()
    if t.ndim != 2:
        raise FrontendError(f"EyeLike takes a 2-D input, got {t}")
    code = n.attr("dtype")
    dtype = str(n.importer.onnx.helper.tensor_dtype_to_np_dtype(code)) if code else t.dtype
    rows, cols = t.shape
    return Constant(np.eye(rows, cols, k=int(n.attr("k", 0)), dtype=np.dtype(dtype)))


@converter("OneHot")
def _one_hot(n: Node) -> Expr:
    """values[1] where the (wrapped) index equals the position along the new axis, else
    values[0]."""
    t = n.type(0)
    depth = int(np.asarray(n.const(1)).reshape(-1)[0])
    values = n.x(2)
    axis = int(n.attr("axis", -1)) % (t.ndim + 1)
    index = n.x(0)
    wrapped = op.where(
        op.less(index, scalar(0, t.dtype)), op.add(index, scalar(depth, t.dtype)), index
    )
    shape = [1] * (t.ndim + 1)
    shape[axis] = depth
    positions = Constant(np.arange(depth, dtype=t.dtype).reshape(shape))
    hit = op.equal(op.expand_dims(wrapped, axis=axis), positions)
    off = op.take(values, Constant(np.asarray(0, np.int64)), axis=0)
    on = op.take(values, Constant(np.asarray(1, np.int64)), axis=0)
    return op.where(hit, on, off)


@converter("GatherND")
def _gather_nd(n: Node) -> Expr:
    """data[batch..., index...]: each index tuple (and the batch position) becomes one
    offset into data flattened over the batch and indexed axes, then a take."""
    data_t, index_t = n.type(0), n.type(1)
    batch = int(n.attr("batch_dims", 0))
    k = index_t.shape[-1]
    lead = data_t.shape[: batch + k]
    strides = np.cumprod((*lead[1:], 1)[::-1])[::-1].astype(np.int64)
    index = op.cast(n.x(1), dtype="int64")
    dims = Constant(np.asarray(data_t.shape[batch : batch + k], np.int64))
    index = op.where(op.less(index, scalar(0, "int64")), op.add(index, dims), index)
    offset = op.sum(op.multiply(index, Constant(strides[batch:])), axis=(-1,))
    if batch:  # the batch position of each index tuple
        grid = np.indices(index_t.shape[:batch]).astype(np.int64)
        base = sum(g * s for g, s in zip(grid, strides[:batch], strict=True))
        base = base.reshape(*index_t.shape[:batch], *[1] * (index_t.ndim - 1 - batch))
        offset = op.add(offset, Constant(np.asarray(base, np.int64)))
    flat = op.reshape(n.x(0), (int(np.prod(lead, dtype=np.int64)), *data_t.shape[batch + k :]))
    return op.take(flat, offset, axis=0, mode="fast")


@converter("ReverseSequence")
def _reverse_sequence(n: Node) -> Expr:
    """Each batch entry's first `length` steps reversed: a gather along the time axis of
    index length - 1 - t where t < length, t elsewhere."""
    t = n.type(0)
    time_axis = int(n.attr("time_axis", 0))
    batch_axis = int(n.attr("batch_axis", 1))
    steps = t.shape[time_axis]
    shape = [1] * t.ndim
    shape[time_axis] = steps
    time = Constant(np.arange(steps, dtype=np.int64).reshape(shape))
    lens_shape = [1] * t.ndim
    lens_shape[batch_axis] = t.shape[batch_axis]
    lengths = op.reshape(op.cast(n.x(1), dtype="int64"), tuple(lens_shape))
    flipped = op.subtract(op.subtract(lengths, scalar(1, "int64")), time)
    index = op.where(op.less(time, lengths), flipped, time)
    return op.gather_elements(n.x(0), op.broadcast_to(index, t.shape), axis=time_axis, mode="fast")


@converter("ScatterElements")
def _scatter_elements(n: Node) -> Expr:
    return op.scatter_elements(
        n.x(0), n.x(1), n.x(2), axis=int(n.attr("axis", 0)), reduction=n.attr("reduction", "none")
    )


@converter("ScatterND")
def _scatter_nd(n: Node) -> Expr:
    return op.scatter_nd(n.x(0), n.x(1), n.x(2), reduction=n.attr("reduction", "none"))


@converter("TopK")
def _topk(n: Node) -> list[Expr]:
    k = int(np.asarray(n.const(1)).reshape(-1)[0])
    both = op.topk(
        n.x(0),
        k=k,
        axis=int(n.attr("axis", -1)),
        largest=bool(n.attr("largest", 1)),
        sorted=bool(n.attr("sorted", 1)),
    )
    return [TupleGetItem(both, 0), TupleGetItem(both, 1)]
