"""Compute definitions of the ops that read their data at computed indices (take,
gather_elements). Registered into COMPUTE when codegen/lower/group.py imports this
module. A take from a small constant integer table (a quantised sigmoid's 256 entries) is a
loop_ir.Lookup: byte permutes, where a gather costs ~30 cycles per 16 lanes."""

from __future__ import annotations

import numpy as np

from ...loop_ir import INDEX, Bin, Cast, LExpr, Lookup, Select, clamp, idx
from .definitions import Ctx, Index, compute


@compute("take")
def _take(ctx: Ctx) -> LExpr:
    axis, mode = ctx.attrs["axis"], ctx.attrs["mode"]
    if axis is None:
        raise NotImplementedError("take without an axis")
    data_shape, ind_shape = ctx.in_types[0].shape, ctx.in_types[1].shape
    axis %= len(data_shape)
    out = ctx.index.multi()
    position: LExpr = Cast(
        INDEX, ctx.readers[1](Index(ind_shape, multi=out[axis : axis + len(ind_shape)]))
    )
    position = _index_mode(position, data_shape[axis], mode)
    table = ctx.data[0] if ctx.data else None
    if table is not None and len(data_shape) == 1 and byte_table(table):
        return Lookup(ctx.out.dtype, tuple(int(v) for v in table), position)
    multi = [*out[:axis], position, *out[axis + len(ind_shape) :]]
    return ctx.readers[0](Index(data_shape, multi=multi))


def byte_table(data: np.ndarray) -> bool:
    """A table loop_ir.Lookup reads: at most 256 integers that each fit in a byte."""
    if data.size > 256 or data.size == 0 or data.dtype.kind not in "iu":
        return False
    low, high = int(data.min()), int(data.max())
    return (low >= -128 and high <= 127) or (low >= 0 and high <= 255)


def _index_mode(position: LExpr, n: int, mode: str) -> LExpr:
    """An index into a dimension of n as take/gather_elements define it: wrap, or clamp
    (after counting negative indices from the end in fast mode, as numpy does)."""
    if mode == "wrap":
        return Bin(INDEX, "add", position % n, idx(n)) % n
    if mode == "fast":
        negative = Bin("bool", "lt", position, idx(0))
        position = Select(INDEX, negative, Bin(INDEX, "add", position, idx(n)), position)
    return clamp(position, 0, n - 1)  # clip mode; keeps a bad index from reading wild


@compute("gather_elements")
def _gather_elements(ctx: Ctx) -> LExpr:
    data_shape, ind_shape = ctx.in_types[0].shape, ctx.in_types[1].shape
    axis = ctx.attrs["axis"] % len(data_shape)
    out = ctx.index.multi()
    position: LExpr = Cast(INDEX, ctx.readers[1](Index(ind_shape, multi=out)))
    multi = [
        *out[:axis],
        _index_mode(position, data_shape[axis], ctx.attrs["mode"]),
        *out[axis + 1 :],
    ]
    return ctx.readers[0](Index(data_shape, multi=multi))
