"""conv2d_winograd: a 3x3 convolution of stride 1 on NCHW16c data by Winograd's minimal
filtering F(m x m, 3x3) (Lavin and Gray, 2016; m = 2 or 4, winograd_matrices.py): n^2
multiplies per m x m outputs (n = m + 2) where the direct convolution does 9 m^2.

Each output tile of m x m pixels reads an n x n input patch d; with the weights
transformed once at compile time (U = G g G^T, n x n per input/output channel pair), the
tile is Y = A^T [sum over channels of U . (B^T d B)] A. So the work splits into three
steps, all on vectors of 16 channels:

1. input transform: every tile of the work item, every input channel block:
   V[pos, tile, C] = (B^T d B)[pos], zero where the patch leaves the map;
2. n^2 independent products, one per position pos of the transformed tile: M[pos] =
   V[pos] x U[pos] (tiles x C by C x O), register-blocked like the pointwise kernel (PR
   tiles x XV vectors of output channels, one weight load per XV, one broadcast per tile);
3. output transform: Y = A^T M A per tile, into the thread's rows, then the fused
   epilogue writes the item's output rows.

A work item is R rows of tiles of one batch item for a part of the output channels
(items are cut so two threads both have work). Its V and M stay in the thread's scratch
(16 x tiles x channels: 115 KB for a row at 56x56, 64 channels, m = 2), so each panel's
weights at one position are read once per item, not once per register block.
The sums run in another order and through the transforms' additions: results differ
from the direct convolution's by rounding (BlockLayout tags the rule fast-math).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant
from egraph_ir.op.nn import norm_padding
from egraph_ir.types import TensorType

from ....llvm.cpu import accumulator_budget
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
    Splat,
    Stmt,
    Store,
    clamp,
    idx,
    within,
)
from ...group import Group
from ...kinds import BufferRef, ConvKernel
from ...strategy import NativeKernel
from .epilogue import lanes_epilogue, micro_kernel
from .shape import MIN_WORK, VECTOR, pixels_per_block, zero
from .winograd_matrices import Minimal, combine, minimal

CACHED_WEIGHTS = 512 * 1024  # bytes of transformed weights that stay in a core's L2
ROW_SCRATCH = 1024 * 1024  # bytes of input transform a work item may hold


@dataclass(frozen=True)
class WinogradShape:
    """Sizes of one conv2d_winograd call on NCHW16c data: channels, the input map, the
    padding before it, the output map, and its tiles (the last row or column of tiles
    is half outside an odd map: computed, not stored)."""

    n: int
    c: int
    h: int
    w: int
    o: int
    top: int
    left: int
    oh: int
    ow: int
    tile: int  # m: outputs per tile side

    @staticmethod
    def of(conv: Call) -> WinogradShape:
        x_t, out_t = conv.args[0].checked_type, conv.checked_type
        assert isinstance(x_t, TensorType) and isinstance(out_t, TensorType)
        n, cb, h, w, _ = x_t.shape
        pads, (oh, ow), tile = _padding(conv), out_t.shape[2:4], int(conv.attrs["tile_size"])
        return WinogradShape(n, cb * LANES, h, w, out_t.shape[1] * LANES, *pads[:2], oh, ow, tile)

    @property
    def algorithm(self) -> Minimal:
        return minimal(self.tile)

    @property
    def positions(self) -> int:
        return self.algorithm.positions

    @property
    def tiles_high(self) -> int:
        return -(-self.oh // self.tile)

    @property
    def tiles_wide(self) -> int:
        return -(-self.ow // self.tile)


def _padding(conv: Call) -> tuple[int, int, int, int]:
    return norm_padding(conv.attrs["padding"])


def fits(conv: Call) -> bool:
    """float32, constant weights, NCHW16c in and out."""
    x_t, out_t = conv.args[0].checked_type, conv.checked_type
    if not (isinstance(x_t, TensorType) and isinstance(out_t, TensorType)):
        return False
    return (
        isinstance(conv.args[1], Constant)
        and x_t.dtype == "float32"
        and conv.attrs["data_layout"] == conv.attrs["out_layout"] == f"NCHW{LANES}c"
        and out_t.shape[2] * out_t.shape[3] > 0
        and min(_padding(conv)) >= 0
        and conv.attrs["tile_size"] in (2, 4)
    )


@dataclass(frozen=True)
class WinogradLayout:
    """XV output blocks per panel, PR tiles per register block, R rows of tiles per work
    item, the panels cut into parts (one work item each), the transformed weights packed
    (n^2, panels, C, W) with W = 16 * XV."""

    xv: int
    pr: int
    rows: int
    parts: int
    packed: np.ndarray

    @property
    def width(self) -> int:
        return self.xv * LANES

    @property
    def panels(self) -> int:
        return self.packed.shape[1]


def layout(conv: Call) -> WinogradLayout:
    """One row of tiles per work item while the weights stay in cache (each row reads
    them all); where they do not (256 and 512 channels), as many rows as the scratch
    allows, so the weights stream from memory once per row group, not once per row."""
    g = WinogradShape.of(conv)
    blocks = g.o // LANES
    xv = next(v for v in (4, 2, 1) if blocks % v == 0)
    rows = 1
    if g.positions * g.c * g.o * 4 > CACHED_WEIGHTS:
        most = max(1, ROW_SCRATCH // (g.positions * g.tiles_wide * g.c * 4))
        rows = max(r for r in range(1, g.tiles_high + 1) if g.tiles_high % r == 0 and r <= most)
    tiles = rows * g.tiles_wide
    pr = pixels_per_block(tiles, max(1, accumulator_budget() // xv))
    panels = blocks // xv
    groups = g.tiles_high // rows
    parts = next(
        (p for p in range(1, panels + 1) if panels % p == 0 and groups * p >= MIN_WORK), panels
    )
    return WinogradLayout(xv, pr, rows, parts, transformed_weights(conv, xv * LANES))


def transformed_weights(conv: Call, width: int) -> np.ndarray:
    """U = G g G^T of every (output, input) channel pair, as (n^2, O / width, C, width):
    kron(G, G) times the flattened 3x3 kernels, one float32 product (the entries of
    kron(G, G) round once; U within 5e-7 of the float64 product on unit weights) — 10x
    faster than in float64 for 512 channels."""
    w = conv.args[1]
    assert isinstance(w, Constant)
    o, c = w.data.shape[:2]
    algorithm = WinogradShape.of(conv).algorithm
    flat = np.asarray(w.data, dtype=np.float32).reshape(o * c, 9).T
    u = (algorithm.kron_g @ flat).reshape(algorithm.positions, o // width, width, c)
    return np.ascontiguousarray(u.transpose(0, 1, 3, 2))


def item_tiles(conv: Call, lay: WinogradLayout) -> int:
    return lay.rows * WinogradShape.of(conv).tiles_wide


def scratch_shapes(conv: Call, lay: WinogradLayout) -> list[tuple[tuple[int, ...], str]]:
    """Per work item: V (n^2 x tiles x C), M (n^2 x tiles x W), its output rows
    (mR x mTW x W)."""
    g = WinogradShape.of(conv)
    work, tiles = work_items(conv, lay), item_tiles(conv, lay)
    return [
        ((work, g.positions * tiles * g.c), "float32"),
        ((work, g.positions * tiles * lay.width), "float32"),
        ((work, _rows_size(g, lay)), "float32"),
    ]


def _rows_size(g: WinogradShape, lay: WinogradLayout) -> int:
    """Elements of an item's output rows: m R rows of m TW pixels of W lanes."""
    return g.tile * lay.rows * g.tile * g.tiles_wide * lay.width


def work_items(conv: Call, lay: WinogradLayout) -> int:
    """(group of rows of tiles, part of the panels) pairs; each loops over the batch, so
    the scratch (a slot per item) does not grow with it."""
    return WinogradShape.of(conv).tiles_high // lay.rows * lay.parts


@dataclass(frozen=True)
class Item:
    """Where work item `work` is: its first row of tiles, its part of the panels, and the
    batch item b its loop is at."""

    b: LoopVar
    ty: LExpr
    part: LExpr

    @staticmethod
    def of(lay: WinogradLayout, work: LExpr) -> Item:
        rows = work // lay.parts
        return Item(
            LoopVar(INDEX, "b"),
            rows * lay.rows,
            work % lay.parts,
        )


def _slot(size: int, offset: LExpr) -> LExpr:
    return THREAD_SLOT * size + offset


def input_transform(conv: Call, lay: WinogradLayout, item: Item, source: str) -> Stmt:
    """V[pos, t, C] = (B^T d B)[pos] for every tile t of the item and channel block."""
    g = WinogradShape.of(conv)
    n, m = g.algorithm.n, g.tile
    t, cb = LoopVar(INDEX, "t"), LoopVar(INDEX, "cb")
    tiles = item_tiles(conv, lay)
    ty = item.ty + t // g.tiles_wide
    tx = t % g.tiles_wide
    plane = (item.b * (g.c // LANES) + cb) * g.h
    stmts: list[Stmt] = []
    d: list[list[LExpr]] = []
    for a in range(n):
        row = ty * m + (a - g.top)
        line: list[LExpr] = []
        for k in range(n):
            col = tx * m + (k - g.left)
            at = (plane + clamp(row, 0, g.h - 1)) * g.w + clamp(col, 0, g.w - 1)
            inside = Bin("bool", "and", within(row, 0, g.h), within(col, 0, g.w))
            load = Load(VECTOR, source, at * LANES)
            line.append(_named(stmts, f"d{a}_{k}", Select(VECTOR, inside, load, zero(VECTOR))))
        d.append(line)
    bt = g.algorithm.bt
    down = [combine(bt, [d[a][k] for a in range(n)], VECTOR) for k in range(n)]  # [k][a]
    rows = [[_named(stmts, f"e{a}_{k}", down[k][a]) for k in range(n)] for a in range(n)]
    size = g.positions * tiles * g.c
    for a in range(n):
        for k, value in enumerate(combine(bt, rows[a], VECTOR)):
            pos = a * n + k
            at = (idx(pos) * idx(tiles) + t) * g.c + cb * LANES
            stmts.append(Store("wino_v", _slot(size, at), value))
    return For("t", tiles, [For("cb", g.c // LANES, stmts, unroll=False)], unroll=False)


def _named(stmts: list[Stmt], name: str, value: LExpr) -> LExpr:
    stmts.append(Declare(name, value))
    return Ref(value.dtype, name)


def products(conv: Call, lay: WinogradLayout, item: Item, panel: LExpr, packed: str) -> Stmt:
    """M[pos, t, W] = sum over channels of V[pos, t, c] * U[pos, panel, c, W], in
    register blocks of PR tiles (the last block moved back to end at the last tile)."""
    g = WinogradShape.of(conv)
    tiles, width = item_tiles(conv, lay), lay.width
    pos, xb, c = LoopVar(INDEX, "pos"), LoopVar(INDEX, "xb"), LoopVar(INDEX, "ch")
    first: LExpr = xb * lay.pr
    if tiles % lay.pr:
        first = Bin(INDEX, "min", first, idx(tiles - lay.pr))
    acc = [[f"acc{r}_{v}" for v in range(lay.xv)] for r in range(lay.pr)]
    body: list[Stmt] = [Declare(name, zero(VECTOR)) for names in acc for name in names]
    u_at = ((pos * lay.panels + panel) * g.c + c) * width
    loads = [Load(VECTOR, packed, u_at + (v * LANES)) for v in range(lay.xv)]
    v_size, m_size = g.positions * tiles * g.c, g.positions * tiles * width
    updates: list[Stmt] = []
    for r in range(lay.pr):
        v_at = (pos * tiles + (first + r)) * g.c + c
        splat = Splat(VECTOR, Load("float32", "wino_v", _slot(v_size, v_at)))
        for v in range(lay.xv):
            product = Bin(VECTOR, "mul", loads[v], splat)
            updates.append(Assign(acc[r][v], Bin(VECTOR, "add", Ref(VECTOR, acc[r][v]), product)))
    body.append(For("ch", g.c, updates, unroll=False))
    for r in range(lay.pr):
        for v in range(lay.xv):
            m_at = (pos * tiles + (first + r)) * width + (v * LANES)
            body.append(Store("wino_m", _slot(m_size, m_at), Ref(VECTOR, acc[r][v])))
    blocks = -(-tiles // lay.pr)
    return For("pos", g.positions, [For("xb", blocks, body, unroll=False)], unroll=False)


def output_transform(conv: Call, lay: WinogradLayout) -> Stmt:
    """Y = A^T M A of every tile of the item and output block of the panel, into the
    item's output rows: rows[m * tile row + q, m * tile column + s, W]."""
    g = WinogradShape.of(conv)
    n, m, at_ = g.algorithm.n, g.tile, g.algorithm.at
    tiles, width = item_tiles(conv, lay), lay.width
    t, v = LoopVar(INDEX, "t"), LoopVar(INDEX, "ov")
    y0 = t // g.tiles_wide * m
    x0 = t % g.tiles_wide * m
    m_size = g.positions * tiles * width
    stmts: list[Stmt] = []

    def loaded(pos: int) -> LExpr:
        at = (idx(pos) * idx(tiles) + t) * width + v * LANES
        return _named(stmts, f"m{pos}", Load(VECTOR, "wino_m", _slot(m_size, at)))

    grid = [[loaded(a * n + k) for k in range(n)] for a in range(n)]
    down = [combine(at_, [grid[a][k] for a in range(n)], VECTOR) for k in range(n)]  # [k][q]
    half = [[_named(stmts, f"h{q}_{k}", down[k][q]) for k in range(n)] for q in range(m)]
    for q in range(m):
        for s, value in enumerate(combine(at_, half[q], VECTOR)):
            pixel = (y0 + q) * (m * g.tiles_wide) + (x0 + s)
            at = pixel * width + v * LANES
            stmts.append(Store("wino_y", _slot(_rows_size(g, lay), at), value))
    return For("t", tiles, [For("ov", lay.xv, stmts, unroll=False)], unroll=False)


def row_sum_at(conv: Call, lay: WinogradLayout, q: LExpr, v: LExpr, p: LExpr, lane: LExpr) -> LExpr:
    """Output row q of the item's rows, pixel p, lane `lane` of output block v."""
    g = WinogradShape.of(conv)
    pixel = q * (g.tile * g.tiles_wide) + p
    at = pixel * lay.width + v * LANES + lane
    return Load("float32", "wino_y", _slot(_rows_size(g, lay), at))


def macs(conv: Call) -> int:
    """The direct convolution's multiply-adds, the measure its rate is quoted in."""
    g = WinogradShape.of(conv)
    return g.n * g.o * g.oh * g.ow * g.c * 9


def blocked_winograd(
    group: Group, anchor: Call, ops: list[str], lay: WinogradLayout, name: str
) -> ConvKernel:
    """conv2d_winograd: a loop over (rows of tiles, part of the panels); per batch item
    the input transform of its tiles, then per panel the n^2 products, the output
    transform and the epilogue of its output rows from the thread's scratch. `name`: the
    kernel's NAME with its tile size, as the profile shows it."""
    g = WinogradShape.of(anchor)
    source = group.buffers[anchor.args[0]].name
    packed = group.buffer_of(Constant(lay.packed))
    item = Item.of(lay, LoopVar(INDEX, "work"))
    per_part = lay.panels // lay.parts
    panel = item.part * per_part + LoopVar(INDEX, "pp")
    q, v = LoopVar(INDEX, "q"), LoopVar(INDEX, "ov")  # output row of the item, block
    blk = panel * lay.xv + v
    y = item.ty * g.tile + q
    start = ((item.b * (g.o // LANES) + blk) * g.oh + y) * g.ow * LANES

    def sums(p: LExpr, lane: LExpr) -> LExpr:
        return row_sum_at(anchor, lay, q, v, p, lane)

    rows = lanes_epilogue(group, start, g.ow, y * g.ow, blk, item.b, sums)
    rows_of_item = g.tile * lay.rows
    left = g.oh - item.ty * g.tile
    last = Bin(INDEX, "min", idx(rows_of_item), left)
    item_rows = For("q", rows_of_item, rows, unroll=False, stop=last)
    epilogue = For("ov", lay.xv, [item_rows], unroll=False)
    per_panel = [
        products(anchor, lay, item, panel, packed),
        output_transform(anchor, lay),
        epilogue,
    ]
    every_item = [
        input_transform(anchor, lay, item, source),
        For("pp", per_part, per_panel, unroll=False),
    ]
    stmts: list[Stmt] = [For(item.b.name, g.n, every_item, unroll=False)]
    names = ("wino_v", "wino_m", "wino_y")
    special = {name: BufferRef("scratch", k) for k, name in enumerate(names)}
    loop = ("work", work_items(anchor, lay))
    return micro_kernel(
        group, anchor, ops, stmts, loop, macs(anchor), special,
        scratch_shapes(anchor, lay), None, name,
    )  # fmt: skip


@dataclass(frozen=True)
class BlockedWinograd(NativeKernel):
    """A conv2d_winograd: F(2x2, 3x3) or F(4x4, 3x3) on 16-lane blocks."""

    NAME: ClassVar[str] = "conv/nchwc-winograd"
    layout: WinogradLayout
    tile: int  # output tile side: 2 or 4

    @property
    def name(self) -> str:
        return f"{self.NAME}-{self.tile}x{self.tile}"

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return blocked_winograd(group, anchor, ops, self.layout, self.name)
