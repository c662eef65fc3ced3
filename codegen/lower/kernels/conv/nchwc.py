"""conv2d_nchwc: convolutions on channel-blocked data (NCHW16c), the kernels behind the
layouts the e-graph chooses (rules/builtin/blocked.rules).

In NCHW16c a pixel's 16 channels of one block are one vector, so:

- a depthwise convolution is one fused multiply-add per tap for 16 channels: the weight
  vector of the tap times the input vector at the tapped pixel, whatever the stride (a
  stride-2 tap is a contiguous load too, where NCHW needs phase planes). Each channel
  block sweeps its output rows in register blocks of PR pixels straight from the input
  (no padded copy: a tap row outside the map takes a zero weight, the border columns are
  computed one pixel at a time without their outside taps); the fused epilogue follows
  each row, in L1.
- a pointwise (1x1) convolution keeps PR pixels x XV output blocks of accumulators: per
  input channel it loads XV weight vectors and broadcasts PR input elements (as
  conv_channels.py). Its sums go through the thread's tile: as they are for a blocked
  result, transposed in registers (16 pixels x 16 channels) for an NCHW one, so the
  epilogue reads and writes whole vectors either way. From NCHW data it takes any window
  (an RGB stem): one input scalar per tap, zero outside the map.

The weights stay OIHW in the IR and are packed at compile time: depthwise (blocks, taps,
16), pointwise panels (O / W, C, taps, W) with W = 16 * XV.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from egraph_ir.expr import Call, Constant, Var
from egraph_ir.op.layout import channel_block
from egraph_ir.types import TensorType

from ....loop_ir import (
    INDEX,
    LANES,
    THREAD_SLOT,
    Assign,
    Bin,
    Declare,
    For,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Select,
    Shuffle,
    Splat,
    Stmt,
    Store,
    add,
    clamp,
    idx,
    mul,
    within,
)
from .channels import accumulator_budget, panels_of
from .shape import ConvShape, conv_shape, zero

VECTOR = f"float32x{LANES}"
MOST_PIXELS = 8  # a depthwise register block: 8 accumulators + up to 25 tap weights


@dataclass(frozen=True)
class BlockedShape(ConvShape):
    """ConvShape's sizes of one conv2d_nchwc call (the plain NCHW ones), and which
    sides are blocked (NCHW16c)."""

    data_blocked: bool
    out_blocked: bool

    @staticmethod
    def of(conv: Call) -> BlockedShape:
        x_t, w_t, out_t = conv.args[0].checked_type, conv.args[1].checked_type, conv.checked_type
        assert isinstance(x_t, TensorType) and isinstance(w_t, TensorType)
        assert isinstance(out_t, TensorType)
        x, out = _plain(x_t.shape), _plain(out_t.shape)
        plain = conv_shape(x, w_t.shape, out, conv.attrs, x_t.dtype)
        sizes = dataclasses.asdict(plain)
        return BlockedShape(**sizes, data_blocked=x_t.ndim == 5, out_blocked=out_t.ndim == 5)

    @property
    def cb(self) -> int:
        return self.c // LANES

    @property
    def ob(self) -> int:
        return self.o // LANES


def _plain(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(N, C, H, W) of an NCHW or NCHW16c shape."""
    if len(shape) == 5:
        return shape[0], shape[1] * shape[4], shape[2], shape[3]
    n, c, h, w = shape
    return n, c, h, w


def _native(conv: Call) -> bool:
    """float32, constant weights, each side NCHW or in blocks of this machine's vector."""
    x_t = conv.args[0].checked_type
    layouts = (conv.attrs["data_layout"], conv.attrs["out_layout"])
    return (
        isinstance(conv.args[0], Var)
        and isinstance(conv.args[1], Constant)
        and isinstance(x_t, TensorType)
        and x_t.dtype == "float32"
        and all(channel_block(layout) in (1, LANES) for layout in layouts)
    )


def depthwise_fits(conv: Call) -> bool:
    """One input and one output channel per group, blocked data in and out."""
    if not _native(conv):
        return False
    g = BlockedShape.of(conv)
    return g.data_blocked and g.out_blocked and conv.attrs["groups"] == g.c == g.o


def window_fits(conv: Call) -> bool:
    """Any window of one group from NCHW data into blocks (an RGB stem), read by the
    pointwise kernel's loop with one input scalar per tap."""
    if not _native(conv) or conv.attrs["groups"] != 1:
        return False
    g = BlockedShape.of(conv)
    return not g.data_blocked and g.out_blocked and min(g.top, g.left, g.bottom, g.right) >= 0


def pointwise_fits(conv: Call) -> bool:
    """A 1x1 convolution of one group without stride or padding, one side blocked at
    least (both NCHW is conv2d's own kernels' work)."""
    if not _native(conv) or conv.attrs["groups"] != 1:
        return False
    g = BlockedShape.of(conv)
    plain_1x1 = (g.kh, g.kw, g.sh, g.sw, g.top, g.left, g.bottom, g.right) == (
        1,
        1,
        1,
        1,
        0,
        0,
        0,
        0,
    )
    return plain_1x1 and (g.data_blocked or g.out_blocked)


# ---------------------------------------------------------------- depthwise
def depthwise_weights(conv: Call) -> np.ndarray:
    """(C, 1, KH, KW) weights as (C/16, KH*KW, 16): a tap's 16 channels are one vector."""
    w = conv.args[1]
    assert isinstance(w, Constant)
    data = np.asarray(w.data, dtype="float32")
    c, taps = data.shape[0], data.shape[2] * data.shape[3]
    return np.ascontiguousarray(data.reshape(c // LANES, LANES, taps).transpose(0, 2, 1))


def pixels_per_block(width: int, most: int) -> int:
    """Equal register blocks along a row: 28 pixels are 4 of 7, not 8+8+8+4."""
    return -(-width // -(-width // most))


def interior_columns(g: BlockedShape) -> tuple[int, int]:
    """[x0, x1): the output columns whose taps all read inside the input row."""
    x0 = -(-g.left // g.sw)
    x1 = (g.w - 1 + g.left - (g.kw - 1) * g.dw) // g.sw + 1
    x0, x1 = min(x0, g.ow), max(min(x1, g.ow), 0)
    return (x0, x1) if x1 > x0 else (g.ow, g.ow)


def depthwise_rows(conv: Call, block: LoopVar, source: str, weights: str, after_row) -> list[Stmt]:
    """Every output row of channel block `block` for every batch item into `out`, read
    straight from the input: a tap row above or below the map takes a zero weight (and a
    clamped row address), the columns whose taps leave the row are computed one pixel at a
    time with those taps left out, the interior in register blocks of PR pixels. Kernel
    rows are a loop (one row's taps unrolled): a 5x5 kernel is not 25 copies of the block.
    `after_row(b, y)` gives the statements that follow a finished row (its epilogue)."""
    g = BlockedShape.of(conv)
    b, y, i = LoopVar(INDEX, "b"), LoopVar(INDEX, "y"), LoopVar(INDEX, "i")
    item = add(mul(b, idx(g.cb)), block)
    row = add(mul(y, idx(g.sh)), add(mul(i, idx(g.dh)), idx(-g.top)))
    tap_row = _TapRow(
        g,
        source,
        mul(add(mul(item, idx(g.h)), clamp(row, 0, g.h - 1)), idx(g.w)),
        [
            Select(
                VECTOR,
                within(row, 0, g.h),
                Load(
                    VECTOR,
                    weights,
                    add(mul(add(mul(block, idx(g.kh)), i), idx(g.kw * LANES)), idx(j * LANES)),
                ),
                zero(VECTOR),
            )
            for j in range(g.kw)
        ],
    )
    x0, x1 = interior_columns(g)
    out_row = mul(add(mul(item, idx(g.oh)), y), idx(g.ow))
    sweep: list[Stmt] = []
    if x1 > x0:
        sweep.append(tap_row.interior(out_row, x0, x1))
    for x in [*range(x0), *range(x1, g.ow)]:
        sweep += tap_row.border_pixel(out_row, x)
    every_row = For("y", g.oh, [*sweep, *after_row(b, y)], unroll=False)
    return [For("b", g.n, [every_row])]


@dataclass(frozen=True)
class _TapRow:
    """One kernel row's taps: the input row's start (`base`, clamped into the map) and
    its KW weight vectors (zero for a row outside the map), inside a loop over rows."""

    g: BlockedShape
    source: str
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
        first: LExpr = add(mul(xb, idx(pr)), idx(x0))
        if (x1 - x0) % pr:
            first = Bin(INDEX, "min", first, idx(x1 - pr))

        def loads(p: int, j: int) -> LExpr:
            column = add(mul(add(first, idx(p)), idx(g.sw)), idx(j * g.dw - g.left))
            return Load(VECTOR, self.source, mul(add(self.base, column), idx(LANES)))

        names = [f"acc{p}" for p in range(pr)]
        body = self._sum(names, loads)
        for p, name in enumerate(names):
            at = mul(add(out_row, add(first, idx(p))), idx(LANES))
            body.append(Store("out", at, Ref(VECTOR, name)))
        return For("xb", -(-(x1 - x0) // pr), body, unroll=False)

    def border_pixel(self, out_row: LExpr, x: int) -> list[Stmt]:
        """Output column x, whose taps leaving the row are left out (known when compiling)."""
        g = self.g

        def loads(p: int, j: int) -> LExpr | None:
            column = x * g.sw + j * g.dw - g.left
            if not 0 <= column < g.w:
                return None
            return Load(VECTOR, self.source, mul(add(self.base, idx(column)), idx(LANES)))

        body = self._sum(["edge"], loads)
        return [*body, Store("out", mul(add(out_row, idx(x)), idx(LANES)), Ref(VECTOR, "edge"))]


def depthwise_macs(conv: Call) -> int:
    g = BlockedShape.of(conv)
    return g.n * g.o * g.oh * g.ow * g.kh * g.kw


# ---------------------------------------------------------------- pointwise
@dataclass(frozen=True)
class PointwiseLayout:
    """XV output blocks per panel, PR pixels per register block, the packed panels
    (output channels padded with zero weights to whole panels)."""

    xv: int
    pr: int
    panels: np.ndarray  # (panels, C, W)
    splits: int = 1  # parts of the pixels each panel's work is cut into, for the threads
    # an NCHW result: 16 pixels x 16 channels per block, transposed in registers so the
    # tile holds each channel's 16 pixels in a row (the epilogue reads whole vectors)
    transposed: bool = False

    @property
    def width(self) -> int:
        return self.xv * LANES

    @property
    def count(self) -> int:
        return self.panels.shape[0]

    @property
    def work(self) -> int:
        """Iterations of the loop the threads share: (panel, part of its pixels)."""
        return self.count * self.splits


MIN_WORK = 8  # work items a blocked kernel is cut into, at least, so both threads have work


def pointwise_layout(conv: Call) -> PointwiseLayout:
    g = BlockedShape.of(conv)
    blocks = -(-g.o // LANES)
    transposed = not g.out_blocked and g.oh * g.ow >= LANES and accumulator_budget() >= LANES
    xv = 2 if blocks % 2 == 0 and accumulator_budget() >= 8 and not transposed else 1
    pr = LANES if transposed else pixels_per_block(g.oh * g.ow, max(1, accumulator_budget() // xv))
    w = conv.args[1]
    assert isinstance(w, Constant)
    data = np.asarray(w.data, dtype="float32")
    width = xv * LANES
    padded = np.zeros((-(-g.o // width) * width, *data.shape[1:]), "float32")
    padded[: g.o] = data
    panels = panels_of(padded, width)
    # a projection to 32 channels is one panel: cut its pixels so every thread has work
    blocks = -(-g.oh * g.ow // pr)
    splits = min(blocks, -(-MIN_WORK // panels.shape[0]))
    return PointwiseLayout(xv, pr, panels, splits, transposed)


def pointwise_tile(conv: Call, lay: PointwiseLayout) -> tuple[tuple[int, ...], str]:
    """Where a register block's sums wait for the epilogue: PR x W per thread slot."""
    return (lay.work, lay.pr * lay.width), "float32"


def tile_at(lay: PointwiseLayout, r: LExpr, lane: LExpr) -> LExpr:
    """Pixel r's channel `lane` in the thread's tile (transposed: rows of pixels)."""
    if lay.transposed:
        return add(mul(add(mul(THREAD_SLOT, idx(lay.width)), lane), idx(lay.pr)), r)
    return add(mul(add(mul(THREAD_SLOT, idx(lay.pr)), r), idx(lay.width)), lane)


def transpose_lanes(rows: list[LExpr], name: str) -> tuple[list[Stmt], list[LExpr]]:
    """The transpose of n vectors of n lanes (n a power of two): log2(n) rounds of perfect
    shuffles, each new vector interleaving the lower or upper halves of two."""
    n = len(rows)
    low = tuple(x for k in range(n // 2) for x in (k, n + k))
    high = tuple(x for k in range(n // 2, n) for x in (k, n + k))
    stmts: list[Stmt] = []
    vectors = rows
    step = 0
    while 1 << step < n:
        made: list[LExpr] = []
        for i in range(n // 2):
            a, b = vectors[i], vectors[i + n // 2]
            for half, mask in (("l", low), ("h", high)):
                local = f"{name}{step}{half}{i}"
                stmts.append(Declare(local, Shuffle(a.dtype, a, b, mask)))
                made.append(Ref(a.dtype, local))
        vectors, step = made, step + 1
    return stmts, vectors


def panel_of(lay: PointwiseLayout, work: LExpr) -> LExpr:
    """The panel of shared iteration `work`."""
    return work if lay.splits == 1 else Bin(INDEX, "div", work, idx(lay.splits))


def pointwise_panel(
    conv: Call, lay: PointwiseLayout, work: LoopVar, source: str, packed: str, after_block
) -> list[Stmt]:
    """Shared iteration `work`: its panel's W output channels at its part of the pixels
    of every item, each register block of PR pixels from `first` into the thread's tile,
    then `after_block(b, first)` (its epilogue, which writes the output). Parts are
    equal; the last ones redo the last block where they do not divide (the same values,
    stored again)."""
    g = BlockedShape.of(conv)
    pixels = g.oh * g.ow
    panel = panel_of(lay, work)
    b, pb = LoopVar(INDEX, "b"), LoopVar(INDEX, "pb")
    blocks = -(-pixels // lay.pr)
    per_part = -(-blocks // lay.splits)
    block: LExpr = pb
    if lay.splits > 1:
        part = Bin(INDEX, "rem", work, idx(lay.splits))
        block = Bin(INDEX, "min", add(mul(part, idx(per_part)), pb), idx(blocks - 1))
    first: LExpr = mul(block, idx(lay.pr))
    if pixels % lay.pr:
        first = Bin(INDEX, "min", first, idx(pixels - lay.pr))
    acc = [[f"acc{r}_{v}" for v in range(lay.xv)] for r in range(lay.pr)]
    body: list[Stmt] = [Declare(name, zero(VECTOR)) for names in acc for name in names]
    reads = _input_reads(g, b, source)
    panel_rows = mul(panel, idx(g.c * g.kh * g.kw))
    updates: list[Stmt] = []
    for j in range(g.kw):
        w_at = mul(add(add(panel_rows, reads.weight_row), idx(j)), idx(lay.width))
        loads = [Load(VECTOR, packed, add(w_at, idx(v * LANES))) for v in range(lay.xv)]
        for r in range(lay.pr):
            splat = Splat(VECTOR, reads.value(add(first, idx(r)), j))
            for v in range(lay.xv):
                product = Bin(VECTOR, "mul", loads[v], splat)
                update = Bin(VECTOR, "add", Ref(VECTOR, acc[r][v]), product)
                updates.append(Assign(acc[r][v], update))
    body.append(reads.loops(updates))
    if lay.transposed:  # channel j's 16 pixels into row j of the tile
        swap, columns = transpose_lanes([Ref(VECTOR, acc[r][0]) for r in range(lay.pr)], "tr")
        body += swap
        body += [Store("tile", tile_at(lay, idx(0), idx(j)), c) for j, c in enumerate(columns)]
    else:
        for v in range(lay.xv):
            for r in range(lay.pr):
                at = tile_at(lay, idx(r), idx(v * LANES))
                body.append(Store("tile", at, Ref(VECTOR, acc[r][v])))
    body += after_block(b, first)
    return [For("b", g.n, [For("pb", per_part, body, unroll=False)])]


@dataclass(frozen=True)
class _Reads:
    """How a panel's update reads its input: the weight row of tap (i, 0) for the
    current channel, the input scalar of a pixel at tap column j, the channel loops."""

    weight_row: LExpr
    value: Callable[[LExpr, int], LExpr]
    loops: Callable[[list[Stmt]], Stmt]


def _input_reads(g: BlockedShape, b: LExpr, source: str) -> _Reads:
    """Blocks of 16 lanes for blocked data (1x1); for NCHW data one loop over channels
    and one over kernel rows, a tap outside the map reading zero."""
    pixels = g.oh * g.ow
    if g.data_blocked:
        cb, lane = LoopVar(INDEX, "cb"), LoopVar(INDEX, "lane")
        plane = add(mul(add(mul(b, idx(g.cb)), cb), idx(pixels * LANES)), lane)

        def blocked(pixel: LExpr, j: int) -> LExpr:
            return Load("float32", source, add(plane, mul(pixel, idx(LANES))))

        def blocked_loops(body: list[Stmt]) -> Stmt:
            return For("cb", g.cb, [For("lane", LANES, body, unroll=False)], unroll=False)

        return _Reads(add(mul(cb, idx(LANES)), lane), blocked, blocked_loops)
    ch = LoopVar(INDEX, "ch")
    i: LExpr = LoopVar(INDEX, "i") if g.kh > 1 else idx(0)  # kernel rows: a loop or none
    plane = mul(add(mul(b, idx(g.c)), ch), idx(g.h * g.w))
    window = (g.kh, g.kw, g.sh, g.sw, g.top, g.left, g.bottom, g.right) != (1, 1, 1, 1, 0, 0, 0, 0)

    def plain(pixel: LExpr, j: int) -> LExpr:
        if not window:
            return Load("float32", source, add(plane, pixel))
        y = add(
            mul(Bin(INDEX, "div", pixel, idx(g.ow)), idx(g.sh)), add(mul(i, idx(g.dh)), idx(-g.top))
        )
        x = add(mul(Bin(INDEX, "rem", pixel, idx(g.ow)), idx(g.sw)), idx(j * g.dw - g.left))
        at = add(plane, add(mul(clamp(y, 0, g.h - 1), idx(g.w)), clamp(x, 0, g.w - 1)))
        inside = Bin("bool", "and", within(y, 0, g.h), within(x, 0, g.w))
        return Select("float32", inside, Load("float32", source, at), zero("float32"))

    def plain_loops(body: list[Stmt]) -> Stmt:
        rows = For("i", g.kh, body, unroll=False) if g.kh > 1 else None
        return For("ch", g.c, [rows] if rows else body, unroll=False)

    row = add(mul(ch, idx(g.kh * g.kw)), mul(i, idx(g.kw))) if g.kh > 1 else mul(ch, idx(g.kw))
    return _Reads(row, plain, plain_loops)


def pointwise_macs(conv: Call) -> int:
    g = BlockedShape.of(conv)
    return g.n * g.o * g.oh * g.ow * g.c * g.kh * g.kw
