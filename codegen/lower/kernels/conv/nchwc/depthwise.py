"""A depthwise conv2d_nchwc (kernel "conv/nchwc-depthwise") on channel-blocked data
(NCHW16c; the layouts the e-graph chooses, rules/builtin/blocked.rules).

A depthwise convolution is one fused multiply-add per tap for 16 channels: the weight
vector of the tap times the input vector at the tapped pixel, whatever the stride (a
stride-2 tap is a contiguous load too, where NCHW needs phase planes). Each channel block
sweeps its output rows in register blocks of PR pixels straight from the input (no padded
copy: a tap row outside the map takes a zero weight, the border columns are computed one
pixel at a time without their outside taps); the fused epilogue follows each row, in L1,
and rewrites the row's sums in place. The weights stay OIHW in the IR and are packed at
compile time as (blocks, taps, 16)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant

from .....loop_ir import (
    INDEX,
    LANES,
    Assign,
    Bin,
    Declare,
    For,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Select,
    Stmt,
    Store,
    clamp,
    idx,
    within,
)
from ....group import Group
from ....kinds import ConvKernel
from ....strategy import NativeKernel
from ..epilogue import lanes_epilogue, micro_kernel
from ..shape import (
    VECTOR,
    BlockedShape,
    native_blocks,
    pixels_per_block,
    zero,
)

MOST_PIXELS = 8  # a depthwise register block: 8 accumulators + up to 25 tap weights


def depthwise_fits(conv: Call) -> bool:
    """One input and one output channel per group, blocked data in and out."""
    if not native_blocks(conv):
        return False
    g = BlockedShape.of(conv)
    return g.data_blocked and g.out_blocked and conv.attrs["groups"] == g.c == g.o


# ---------------------------------------------------------------- depthwise
def depthwise_weights(conv: Call) -> np.ndarray:
    """(C, 1, KH, KW) weights as (C/16, KH*KW, 16): a tap's 16 channels are one vector."""
    w = conv.args[1]
    assert isinstance(w, Constant)
    data = np.asarray(w.data, dtype="float32")
    c, taps = data.shape[0], data.shape[2] * data.shape[3]
    return np.ascontiguousarray(data.reshape(c // LANES, LANES, taps).transpose(0, 2, 1))


def interior_columns(g: BlockedShape) -> tuple[int, int]:
    """[x0, x1): the output columns whose taps all read inside the input row."""
    x0 = -(-g.left // g.sw)
    x1 = (g.w - 1 + g.left - (g.kw - 1) * g.dw) // g.sw + 1
    x0, x1 = min(x0, g.ow), max(min(x1, g.ow), 0)
    return (x0, x1) if x1 > x0 else (g.ow, g.ow)


def depthwise_rows(
    conv: Call,
    block: LoopVar,
    source: str,
    weights: str,
    after_row,
    sums: RowSums | None = None,
) -> list[Stmt]:
    """Every output row of channel block `block` for every batch item into `out`, read
    straight from the input: a tap row above or below the map takes a zero weight (and a
    clamped row address), the columns whose taps leave the row are computed one pixel at a
    time with those taps left out, the interior in register blocks of PR pixels. Kernel
    rows are a loop (one row's taps unrolled): a 5x5 kernel is not 25 copies of the block.
    `after_row(b, y)` gives the statements that follow a finished row (its epilogue).
    `sums`: how the input is read and where a row's sums go (default: float32 input, the
    sums into the output, where the epilogue rewrites them in place)."""
    g = BlockedShape.of(conv)
    sums = sums if sums is not None else RowSums()
    b, y, i = LoopVar(INDEX, "b"), LoopVar(INDEX, "y"), LoopVar(INDEX, "i")
    item = b * g.cb + block
    row = y * g.sh + (i * g.dh + (-g.top))
    tap_row = _TapRow(
        g,
        source,
        sums,
        (item * g.h + clamp(row, 0, g.h - 1)) * g.w,
        [
            Select(
                VECTOR,
                within(row, 0, g.h),
                Load(
                    VECTOR,
                    weights,
                    (block * g.kh + i) * (g.kw * LANES) + (j * LANES),
                ),
                zero(VECTOR),
            )
            for j in range(g.kw)
        ],
    )
    x0, x1 = interior_columns(g)
    out_row = sums.row(item * g.oh + y, g)
    sweep: list[Stmt] = []
    if x1 > x0:
        sweep.append(tap_row.interior(out_row, x0, x1))
    for x in [*range(x0), *range(x1, g.ow)]:
        sweep += tap_row.border_pixel(out_row, x)
    every_row = For("y", g.oh, [*sweep, *after_row(b, y)], unroll=False)
    return [For("b", g.n, [every_row])]


@dataclass(frozen=True)
class RowSums:
    """How depthwise_rows reads an input vector (at an element offset of its source) and
    where it stores a finished row's sums (the output itself: in place for the
    epilogue)."""

    dest: str = "out"

    def read(self, source: str, at: LExpr) -> LExpr:
        return Load(VECTOR, source, at)

    def row(self, row: LExpr, g: BlockedShape) -> LExpr:
        """Where in `dest` (in pixels) output row `row` starts: its number counts the
        item's and channel block's rows before it."""
        return row * g.ow


@dataclass(frozen=True)
class _TapRow:
    """One kernel row's taps: the input row's start (`base`, clamped into the map) and
    its KW weight vectors (zero for a row outside the map), inside a loop over rows."""

    g: BlockedShape
    source: str
    sums: RowSums
    base: LExpr
    weights: list[LExpr]

    def _sum(self, names: list[str], loads) -> list[Stmt]:
        """Zeroed accumulators, then over kernel rows: acc[p] += w[j] * loads(p, j)."""
        updates: list[Stmt] = []
        for j, weight in enumerate(self.weights):
            for p, name in enumerate(names):
                value = loads(p, j)
                if value is None:
                    continue
                product = Bin(VECTOR, "mul", weight, value)
                updates.append(Assign(name, Bin(VECTOR, "add", Ref(VECTOR, name), product)))
        declare: list[Stmt] = [Declare(name, zero(VECTOR)) for name in names]
        return [*declare, For("i", self.g.kh, updates, unroll=False)]

    def interior(self, out_row: LExpr, x0: int, x1: int) -> Stmt:
        """Columns x0 .. x1 - 1 in register blocks of PR pixels (the last moved back to
        end at x1 - 1: a few pixels computed twice, one block of code)."""
        g = self.g
        pr = pixels_per_block(x1 - x0, MOST_PIXELS)
        xb = LoopVar(INDEX, "xb")
        first: LExpr = xb * pr + x0
        if (x1 - x0) % pr:
            first = Bin(INDEX, "min", first, idx(x1 - pr))

        def loads(p: int, j: int) -> LExpr:
            column = (first + p) * g.sw + (j * g.dw - g.left)
            return self.sums.read(self.source, (self.base + column) * LANES)

        names = [f"acc{p}" for p in range(pr)]
        body = self._sum(names, loads)
        for p, name in enumerate(names):
            at = (out_row + (first + p)) * LANES
            body.append(Store(self.sums.dest, at, Ref(VECTOR, name)))
        return For("xb", -(-(x1 - x0) // pr), body, unroll=False)

    def border_pixel(self, out_row: LExpr, x: int) -> list[Stmt]:
        """Output column x, whose taps leaving the row are left out (known when compiling)."""
        g = self.g

        def loads(p: int, j: int) -> LExpr | None:
            column = x * g.sw + j * g.dw - g.left
            if not 0 <= column < g.w:
                return None
            return self.sums.read(self.source, (self.base + column) * LANES)

        body = self._sum(["edge"], loads)
        return [*body, Store(self.sums.dest, (out_row + x) * LANES, Ref(VECTOR, "edge"))]


def depthwise_macs(conv: Call) -> int:
    g = BlockedShape.of(conv)
    return g.n * g.o * g.oh * g.ow * g.kh * g.kw


def blocked_depthwise(group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
    """Depthwise conv2d_nchwc: a loop over channel blocks, each sweeping its rows, each
    row followed by its epilogue."""
    g = BlockedShape.of(anchor)
    source = group.buffers[anchor.args[0]].name
    weights = group.buffer_of(Constant(depthwise_weights(anchor)))
    block = LoopVar(INDEX, "blk")

    def after_row(b: LExpr, y: LExpr) -> list[Stmt]:
        row = ((b * g.ob + block) * g.oh + y) * g.ow
        return lanes_epilogue(group, row * LANES, g.ow, y * g.ow, block, b)

    stmts = depthwise_rows(anchor, block, source, weights, after_row)
    macs = depthwise_macs(anchor)
    return micro_kernel(
        group, anchor, ops, stmts, ("blk", g.cb), macs, {}, [], None, BlockedDepthwise.NAME
    )


@dataclass(frozen=True)
class BlockedDepthwise(NativeKernel):
    """A depthwise conv2d_nchwc: a vector of 16 channels per tap."""

    NAME: ClassVar[str] = "conv/nchwc-depthwise"

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return blocked_depthwise(group, anchor, ops)
