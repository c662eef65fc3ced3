"""A 1x1 conv2d_nchwc, or from NCHW data any window (kernel "conv/nchwc-pointwise").

It keeps PR pixels x XV output blocks of accumulators: per input channel it loads XV
weight vectors and broadcasts PR input elements (as channels.py). Its sums go through the
thread's tile: as they are for a blocked result, transposed in registers (16 pixels x 16
channels) for an NCHW one, so the epilogue reads and writes whole vectors either way.
From NCHW data it takes any window (an RGB stem): one input scalar per tap, read from a
zero-padded copy where the window pads. Threads may share a panel (its pixels cut into
parts): a block two parts compute is written twice with the same values, never rewritten
twice. The weights are packed at compile time into panels (O / W, C, taps, W) with
W = 16 * XV."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant

from .....llvm.cpu import accumulator_budget
from .....loop_ir import (
    INDEX,
    LANES,
    THREAD_SLOT,
    Assign,
    Bin,
    Declare,
    For,
    Kernel,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Shuffle,
    Splat,
    Stmt,
    Store,
    heavy,
    idx,
)
from ....compute.definitions import Index
from ....group import Group
from ....kinds import BufferRef, ConvKernel
from ....strategy import NativeKernel
from ..channels import panels_of
from ..epilogue import lanes_epilogue, micro_kernel
from ..prologue import pad_kernel
from ..shape import (
    L2_SHARE,
    MIN_WORK,
    VECTOR,
    BlockedShape,
    native_blocks,
    pixels_per_block,
    zero,
)


def window_fits(conv: Call) -> bool:
    """Any window of one group from NCHW data into blocks (an RGB stem), read by the
    pointwise kernel's loop with one input scalar per tap."""
    if not native_blocks(conv) or conv.attrs["groups"] != 1:
        return False
    g = BlockedShape.of(conv)
    return not g.data_blocked and g.out_blocked and min(g.top, g.left, g.bottom, g.right) >= 0


def pointwise_fits(conv: Call) -> bool:
    """A 1x1 convolution of one group without stride or padding, one side blocked at
    least (both NCHW is conv2d's own kernels' work)."""
    if not native_blocks(conv) or conv.attrs["groups"] != 1:
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


# ---------------------------------------------------------------- pointwise
@dataclass(frozen=True)
class PanelSums:
    """How a panel's register block sums: float32 products of a broadcast input scalar
    with the panel's weight vectors (int8.py: VNNI dot products of a broadcast word
    of four input bytes with weight words, into int32)."""

    vector: str = VECTOR

    @property
    def scalar(self) -> str:
        return self.vector.partition("x")[0]

    def reads(self, g: BlockedShape, b: LExpr, source: str) -> PanelReads:
        return _input_reads(g, b, source)

    def splat(self, value: LExpr) -> LExpr:
        return Splat(self.vector, value)

    def update(self, acc: LExpr, weights: LExpr, splat: LExpr) -> LExpr:
        return Bin(self.vector, "add", acc, Bin(self.vector, "mul", weights, splat))

    def finish(self, acc: LExpr, lanes: LExpr) -> LExpr:
        """The block's sums for the panel's channels from `lanes`, as the tile holds them."""
        return acc

    @property
    def name(self) -> str:
        return BlockedPointwise.NAME

    def prologue(self, conv: Call, name: str) -> tuple[Kernel | None, tuple[tuple[int, ...], str]]:
        """A kernel writing what the panels read, and its scratch, or None: the input
        itself. A window over NCHW data reads a zero-padded copy (one load per tap and
        pixel, where bounds tests and a select cost more than the product did: an RGB stem
        ran at 17 GFLOP/s)."""
        g = BlockedShape.of(conv)
        if (g.top, g.left, g.bottom, g.right) == (0, 0, 0, 0):
            return None, ((), "")
        return pad_kernel(g, name)


FLOAT_PANEL = PanelSums()


@dataclass(frozen=True)
class PointwiseLayout:
    """XV output blocks per panel, PR pixels per register block, the packed panels
    (output channels padded with zero weights to whole panels)."""

    xv: int
    pr: int
    panels: np.ndarray  # (panels, C, W)
    splits: int = 1  # parts of the pixels each panel's work is cut into, for the threads
    # batch items the shared loop runs over, each item's panels in turn (its input stays
    # in cache; panels sweeping the whole batch re-read it from memory each: a batch of 8
    # ran EfficientNet-B0's projections at a third of the rate of batch 1)
    items: int = 1
    # an NCHW result: 16 pixels x 16 channels per block, transposed in registers so the
    # tile holds each channel's 16 pixels in a row (the epilogue reads whole vectors)
    transposed: bool = False
    # every panel in turn on a block of pixels, whose input stays in L1, rather than each
    # panel sweeping the item's pixels: where an item's input overflows the core's share
    # of L2 (a 56x56 map of 144 channels, 1.8 MB, was read once per panel from memory)
    panels_inner: bool = False

    @property
    def width(self) -> int:
        return self.xv * LANES

    @property
    def count(self) -> int:
        return self.panels.shape[0]

    @property
    def shared_panels(self) -> int:
        """Panels among the iterations the threads share (none: each runs every panel)."""
        return 1 if self.panels_inner else self.count

    @property
    def work(self) -> int:
        """Iterations of the loop the threads share: (item, panel, part of its pixels)."""
        return self.items * self.shared_panels * self.splits


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
    item_input = g.c * g.h * g.w * 4
    inner = panels.shape[0] > 1 and item_input > L2_SHARE and panels.nbytes <= L2_SHARE
    # a projection to 32 channels is one panel: cut its pixels so every thread has work
    blocks = -(-g.oh * g.ow // pr)
    splits = min(blocks, -(-MIN_WORK // ((1 if inner else panels.shape[0]) * g.n)))
    return PointwiseLayout(
        xv, pr, panels, splits, transposed=transposed, items=g.n, panels_inner=inner
    )


def pointwise_tile(
    conv: Call, lay: PointwiseLayout, sums: PanelSums = FLOAT_PANEL
) -> tuple[tuple[int, ...], str]:
    """Where a register block's sums wait for the epilogue: PR x W per thread slot."""
    return (lay.work, lay.pr * lay.width), sums.scalar


def tile_at(lay: PointwiseLayout, r: LExpr, lane: LExpr) -> LExpr:
    """Pixel r's channel `lane` in the thread's tile (transposed: rows of pixels)."""
    if lay.transposed:
        return (THREAD_SLOT * lay.width + lane) * lay.pr + r
    return (THREAD_SLOT * lay.pr + r) * lay.width + lane


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


def _in_item(lay: PointwiseLayout, work: LExpr) -> LExpr:
    """Shared iteration `work` within its item: (panel, part)."""
    return work % (lay.shared_panels * lay.splits)


def panel_of(lay: PointwiseLayout, work: LExpr) -> LExpr:
    """The panel of shared iteration `work` (with panels_inner, the panel loop's)."""
    if lay.panels_inner:
        return LoopVar(INDEX, "pn")
    local = _in_item(lay, work)
    return local if lay.splits == 1 else local // lay.splits


def pointwise_panel(
    conv: Call,
    lay: PointwiseLayout,
    work: LoopVar,
    source: str,
    packed: str,
    after_block,
    sums: PanelSums = FLOAT_PANEL,
) -> list[Stmt]:
    """Shared iteration `work`: its panel's W output channels at its part of the pixels
    of its item, each register block of PR pixels from `first` into the thread's tile,
    then `after_block(b, first)` (its epilogue, which writes the output). Parts are
    equal; the last ones redo the last block where they do not divide (the same values,
    stored again)."""
    g = BlockedShape.of(conv)
    pixels = g.oh * g.ow
    panel = panel_of(lay, work)
    pb = LoopVar(INDEX, "pb")
    b = work // (lay.shared_panels * lay.splits)
    blocks = -(-pixels // lay.pr)
    per_part = -(-blocks // lay.splits)
    block: LExpr = pb
    if lay.splits > 1:
        part = _in_item(lay, work) % lay.splits
        block = Bin(INDEX, "min", part * per_part + pb, idx(blocks - 1))
    first: LExpr = block * lay.pr
    if pixels % lay.pr:
        first = Bin(INDEX, "min", first, idx(pixels - lay.pr))
    vec = sums.vector
    acc = [[f"acc{r}_{v}" for v in range(lay.xv)] for r in range(lay.pr)]
    body: list[Stmt] = [Declare(name, zero(vec)) for names in acc for name in names]
    reads = sums.reads(g, b, source)
    panel_rows = panel * (lay.panels.shape[1] * g.kh * g.kw)
    updates: list[Stmt] = []
    for j in range(reads.columns):
        w_at = (panel_rows + reads.weight_row + j) * lay.width
        loads = [Load(vec, packed, w_at + (v * LANES)) for v in range(lay.xv)]
        for r in range(lay.pr):
            splat = sums.splat(reads.value(first + r, j))
            for v in range(lay.xv):
                update = sums.update(Ref(vec, acc[r][v]), loads[v], splat)
                updates.append(Assign(acc[r][v], update))
    body.append(reads.loops(updates))
    lanes = [panel * lay.width + (v * LANES) for v in range(lay.xv)]
    if lay.transposed:  # channel j's 16 pixels into row j of the tile
        rows = [sums.finish(Ref(vec, acc[r][0]), lanes[0]) for r in range(lay.pr)]
        swap, columns = transpose_lanes(rows, "tr")
        body += swap
        body += [Store("tile", tile_at(lay, idx(0), idx(j)), c) for j, c in enumerate(columns)]
    else:
        for v in range(lay.xv):
            for r in range(lay.pr):
                at = tile_at(lay, idx(r), idx(v * LANES))
                body.append(Store("tile", at, sums.finish(Ref(vec, acc[r][v]), lanes[v])))
    body += after_block(b, first)
    if lay.panels_inner:
        body = [For("pn", lay.count, body, unroll=False)]
    return [For("pb", per_part, body, unroll=False)]


@dataclass(frozen=True)
class PanelReads:
    """How a panel's update reads its input: the weight row of tap (i, 0) for the
    current channel, the input scalar of a pixel at tap column j (of `columns` unrolled per
    step: the kernel's width, or every tap where a reader unrolls its rows too), the
    channel loops."""

    weight_row: LExpr
    value: Callable[[LExpr, int], LExpr]
    loops: Callable[[list[Stmt]], Stmt]
    columns: int


def _input_reads(g: BlockedShape, b: LExpr, source: str) -> PanelReads:
    """Blocks of 16 lanes for blocked data (1x1); for NCHW data one loop over channels
    and one over kernel rows, a tap outside the map reading zero."""
    pixels = g.oh * g.ow
    if g.data_blocked:
        cb, lane = LoopVar(INDEX, "cb"), LoopVar(INDEX, "lane")
        plane = (b * g.cb + cb) * (pixels * LANES) + lane

        def blocked(pixel: LExpr, j: int) -> LExpr:
            return Load("float32", source, plane + pixel * LANES)

        def blocked_loops(body: list[Stmt]) -> Stmt:
            return For("cb", g.cb, [For("lane", LANES, body, unroll=False)], unroll=False)

        return PanelReads(cb * LANES + lane, blocked, blocked_loops, g.kw)
    ch = LoopVar(INDEX, "ch")
    i: LExpr = LoopVar(INDEX, "i") if g.kh > 1 else idx(0)  # kernel rows: a loop or none
    hp, wp = g.padded  # a padded window reads the padded copy (blocked_pointwise)
    plane = (b * g.c + ch) * (hp * wp)
    window = (g.kh, g.kw, g.sh, g.sw) != (1, 1, 1, 1)

    def plain(pixel: LExpr, j: int) -> LExpr:
        if not window:
            return Load("float32", source, plane + pixel)
        y = pixel // g.ow * g.sh + i * g.dh
        x = pixel % g.ow * g.sw + j * g.dw
        return Load("float32", source, plane + (y * wp + x))

    def plain_loops(body: list[Stmt]) -> Stmt:
        rows = For("i", g.kh, body, unroll=False) if g.kh > 1 else None
        return For("ch", g.c, [rows] if rows else body, unroll=False)

    row = ch * (g.kh * g.kw) + i * g.kw if g.kh > 1 else ch * g.kw
    return PanelReads(row, plain, plain_loops, g.kw)


def pointwise_macs(conv: Call) -> int:
    g = BlockedShape.of(conv)
    return g.n * g.o * g.oh * g.ow * g.c * g.kh * g.kw


def blocked_pointwise(
    group: Group,
    anchor: Call,
    ops: list[str],
    lay: PointwiseLayout,
    sums: PanelSums = FLOAT_PANEL,
) -> ConvKernel:
    """Pointwise conv2d_nchwc: a loop over (panel of W output channels, part of the
    pixels), each register block of pixels followed by its epilogue from the thread's
    tile into the blocked output or the NCHW planes."""
    g = BlockedShape.of(anchor)
    source = group.buffers[anchor.args[0]].name
    packed = group.buffer_of(Constant(lay.panels))
    work = LoopVar(INDEX, "work")
    panel = panel_of(lay, work)
    pixels = g.oh * g.ow
    special: dict[str, BufferRef] = {}
    scratches = []
    pad, padded = sums.prologue(anchor, f"{group.name}_pad")
    if pad is not None:
        special["xpad"] = BufferRef("scratch", 0)
        scratches.append(padded)
        source = "xpad"
    special["tile"] = BufferRef("scratch", len(scratches))
    scratches.append(pointwise_tile(anchor, lay, sums))

    def after_block(b: LExpr, first: LExpr) -> list[Stmt]:
        if not g.out_blocked:
            return _planes_from_tile(group, lay, panel, b, first, sums.scalar)
        stmts: list[Stmt] = []
        for v in range(lay.xv):
            blk = panel * lay.xv + v
            start = ((b * g.ob + blk) * pixels + first) * LANES

            def read(p: LExpr, lane: LExpr, v: int = v) -> LExpr:
                return Load(sums.scalar, "tile", tile_at(lay, p, (v * LANES) + lane))

            stmts += lanes_epilogue(group, start, lay.pr, first, blk, b, read)
        return stmts

    stmts = pointwise_panel(anchor, lay, work, source, packed, after_block, sums)
    macs = pointwise_macs(anchor)
    loop = ("work", lay.work)
    return micro_kernel(group, anchor, ops, stmts, loop, macs, special, scratches, pad, sums.name)


def _planes_from_tile(
    group: Group, lay: PointwiseLayout, panel: LExpr, b: LExpr, first: LExpr, dtype: str
) -> list[Stmt]:
    """The epilogue of a register block into NCHW planes: for each of the panel's W
    channels, its PR pixels (contiguous in the plane) from the tile. Lanes past the last
    channel (a padded panel) redo the last channel, writing the value it already has."""
    shape = group.out_type.shape  # (N, O, OH, OW)
    lane, r = LoopVar(INDEX, "el"), LoopVar(INDEX, "er")
    o = Bin(INDEX, "min", panel * lay.width + lane, idx(shape[1] - 1))
    pixel = first + r
    rows = [pixel // shape[3], pixel % shape[3]]
    plane = b * shape[1] + o
    index = Index(shape, multi=[b, o, *rows], flat=plane * (shape[2] * shape[3]) + pixel)
    at = tile_at(lay, r, o - panel * lay.width)
    store = Store("out", index.flat(), group.result_at(index, Load(dtype, "tile", at)))
    pixels = For("er", lay.pr, [store], unroll=True, vectorize=True)
    return [For("el", lay.width, [pixels], unroll=False, outline=heavy([store]))]


@dataclass(frozen=True)
class BlockedPointwise(NativeKernel):
    """A 1x1 conv2d_nchwc (or, from NCHW data, any window): output channels in the lanes."""

    NAME: ClassVar[str] = "conv/nchwc-pointwise"
    layout: PointwiseLayout

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return blocked_pointwise(group, anchor, ops, self.layout)
