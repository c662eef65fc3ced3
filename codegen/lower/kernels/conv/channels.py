"""conv2d vectorised over output channels: the kernel for small feature maps.

The direct kernel (direct.py) puts output pixels in the vector lanes, so a 7x7 map fills
49 of 64 lanes and a 14x14 map 196 of 256, and its padded rows waste more. Here a vector
holds 16 output channels of one pixel instead (NCHWc blocking, done inside one kernel):
the weights are packed at compile time into panels of W = 16*XV output channels,
packed[panel, c, tap, 0:W], and a register block keeps PR pixels x XV vectors of
accumulators; for every input channel and tap it loads XV weight vectors and broadcasts
PR input elements: PR*XV fused multiply-adds per XV loads, every lane useful.

The block's results go to the calling thread's slot of a scratch tile laid out pixel by pixel
(tile[p, 0:W]); the fused epilogue then writes each channel's plane of the NCHW output from it
(codegen/lower/kernels/conv/epilogue.py: channel_conv). The input is read in place for a 1x1
convolution without stride or padding; otherwise from the direct kernel's padded phase planes
(phase_kernel), which make every tap a fixed offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant, Var
from egraph_ir.types import TensorType

from ....llvm.cpu import accumulator_budget
from ....loop_ir import (
    INDEX,
    LANES,
    THREAD_SLOT,
    Assign,
    Bin,
    Const,
    Declare,
    For,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Splat,
    Stmt,
    Store,
    idx,
)
from ...compute.definitions import Index
from ...group import Group
from ...kinds import BufferRef, ConvKernel
from ...strategy import NativeKernel
from .direct import pointwise
from .epilogue import channel_block, micro_kernel
from .prologue import phase_kernel
from .shape import FLOAT_SUMS, Accumulation, ConvShape, Wide, zero

# When lanes over channels win, measured against the direct kernel on this project's
# real models' layers (2 threads, AVX-512; README "Performance"): every 7x7 and 14x14
# layer (0.68-0.88 of the direct kernel's time), 28x28 only where padding or a stride
# leaves direct lanes idle (0.85-0.90; a 28x28 plane whose rows fill whole vectors: 1.5x
# slower), never 56x56 or larger (its tile leaves the cache: 1.3-2.7x slower), and not
# with fewer than 64 multiply-adds per output (the epilogue's transposing read then costs
# more than the idle lanes did: 16 channels 1x1 at 112x112, 2.7x slower).
SMALL_PLANE = 196  # 14x14: always
MAX_PLANE = 784  # 28x28: when the direct kernel uses under LANE_USE of its lanes
LANE_USE = 0.95
MIN_MACS = 64  # per output element
MAX_TAPS = 9  # every tap is unrolled: a 7x7 kernel would be 49 copies of the block


@dataclass(frozen=True)
class ChannelLayout:
    """How one convolution is blocked: XV vectors of output channels per panel, PR pixels
    per register block, the input read in place or from padded phase planes (`wide`)."""

    xv: int
    pr: int
    wide: Wide | None  # None: the input itself (1x1, no stride, no padding)
    panels: np.ndarray  # (O / W, C, KH*KW, W)

    @property
    def width(self) -> int:
        return self.xv * LANES


def fits(conv: Call) -> bool:
    """float32, one group, constant weights, output channels in whole vectors."""
    g = ConvShape.of(conv)
    return (
        isinstance(conv.args[0], Var)
        and isinstance(conv.args[1], Constant)
        and g.dtype == "float32"
        and int(conv.attrs["groups"]) == 1
        and g.o % LANES == 0
        and min(g.top, g.left, g.bottom, g.right) >= 0
    )


def lane_use(conv: Call, wide: Wide) -> float:
    """The share of the direct kernel's vector lanes that compute real outputs."""
    g = ConvShape.of(conv)
    return g.oh * g.ow / wide.q


def can_take(conv: Call) -> bool:
    """This kernel can compute the convolution (and compiles in reasonable time)."""
    g = ConvShape.of(conv)
    return fits(conv) and g.kh * g.kw <= MAX_TAPS


def worth_it(conv: Call, wide: Wide) -> bool:
    """Whether this kernel beats the direct one by the measurements above (a kernel
    database's measurement for the shape, when there is one, decides instead)."""
    g = ConvShape.of(conv)
    plane, taps = g.oh * g.ow, g.kh * g.kw
    if not can_take(conv) or g.c * taps < MIN_MACS:
        return False
    return plane <= SMALL_PLANE or (plane <= MAX_PLANE and lane_use(conv, wide) < LANE_USE)


def blocking(g: ConvShape) -> tuple[int, int]:
    """(XV, PR): vectors of output channels per panel, pixels per register block."""
    xv = 2 if g.o % (2 * LANES) == 0 and accumulator_budget() >= 8 else 1
    most, pixels = max(1, accumulator_budget() // xv), g.oh * g.ow
    pr = -(-pixels // -(-pixels // most))  # equal blocks: 49 pixels are 3 of 17, not 24+24+1
    return xv, pr


def panels_of(weights: np.ndarray, width: int) -> np.ndarray:
    """(O, C, *taps) weights as panels (O / width, C, taps, width)."""
    o, c = weights.shape[:2]
    w = weights.reshape(o // width, width, c, -1)
    return np.ascontiguousarray(w.transpose(0, 2, 3, 1))


def layout(conv: Call, wide: Wide) -> ChannelLayout:
    """The blocking of a convolution `can_take` accepts; `wide` is its direct layout,
    whose padded phase planes this kernel reads unless it reads the input itself."""
    g = ConvShape.of(conv)
    weights = conv.args[1]
    assert isinstance(weights, Constant)
    xv, pr = blocking(g)
    panels = panels_of(np.asarray(weights.data, dtype="float32"), xv * LANES)
    return ChannelLayout(xv, pr, None if pointwise(conv) else wide, panels)


def tile_shape(conv: Call, lay: ChannelLayout) -> tuple[int, ...]:
    """The scratch tile: a slot per panel (the threads use their first one's)."""
    g = ConvShape.of(conv)
    return (g.o // lay.width, g.n, g.oh * g.ow * lay.width)


def tile_at(conv: Call, lay: ChannelLayout, b: LExpr, pixel: LExpr, lane: LExpr) -> LExpr:
    """Where output channel `lane` of the panel at `pixel` of item b is in the tile."""
    g = ConvShape.of(conv)
    slot = THREAD_SLOT * g.n + b
    return (slot * (g.oh * g.ow) + pixel) * lay.width + lane


def panel_block(
    conv: Call,
    lay: ChannelLayout,
    panel: LoopVar,
    source: str,
    packed: str,
    tile: str,
    arithmetic: Accumulation = FLOAT_SUMS,
) -> list[Stmt]:
    """Every pixel of every batch item for the panel's W output channels, into the tile:
    blocks of PR pixels, the last one moved back to end at the last pixel (its first
    pixels are computed twice and stored twice, the same values): one block of code, not
    a second one for the pixels % PR left over (which cost a third of the compile)."""
    g = ConvShape.of(conv)
    pixels = g.oh * g.ow
    b, pb = LoopVar(INDEX, "b"), LoopVar(INDEX, "pb")
    blocks = -(-pixels // lay.pr)
    first: LExpr = pb * lay.pr
    if pixels % lay.pr:
        first = Bin(INDEX, "min", first, idx(pixels - lay.pr))
    main = _pixel_block(conv, lay, first, b, panel, (source, packed, tile), arithmetic)
    return [For("b", g.n, [For("pb", blocks, main)])]


def _channel_size(g: ConvShape, lay: ChannelLayout) -> int:
    """Elements of one input channel in the source: its plane, or its phase planes."""
    return g.h * g.w if lay.wide is None else len(lay.wide.phases) * lay.wide.plane


def _input_offset(g: ConvShape, lay: ChannelLayout, channels: int, b: LExpr, pixel: LExpr) -> LExpr:
    """Where output `pixel`'s tap (0, 0) reads input channel 0 of item b."""
    item = b * (channels * _channel_size(g, lay))
    if lay.wide is None:
        return item + pixel
    y, x = pixel // g.ow, pixel % g.ow
    return item + (y * lay.wide.wp + x)


def _pixel_block(
    conv: Call,
    lay: ChannelLayout,
    first: LExpr,
    b: LExpr,
    panel: LoopVar,
    buffers: tuple[str, str, str],
    arithmetic: Accumulation,
) -> list[Stmt]:
    """PR pixels from `first`: PR x XV accumulators over channels and taps; `buffers`
    are the source, the packed weights and the tile."""
    g = ConvShape.of(conv)
    source, packed, tile = buffers
    vec = arithmetic.vector
    ch = LoopVar(INDEX, "ch")
    channels = arithmetic.channels(g, 1)
    taps, rows = g.kh * g.kw, lay.pr
    acc = [[f"acc{r}_{v}" for v in range(lay.xv)] for r in range(rows)]
    body: list[Stmt] = [Declare(name, zero(vec)) for names in acc for name in names]
    channel = ch * _channel_size(g, lay)
    starts = [_input_offset(g, lay, channels, b, first + r) + channel for r in range(rows)]
    weights_at = (panel * channels + ch) * (taps * lay.width)
    # With one phase plane, a loop over kernel rows with one row's taps unrolled: a fully
    # unrolled 3x3 block doubled LLVM's time for the layer and ran no faster. Strided
    # taps (several planes) stay unrolled: their row offsets are constants only then.
    row_loop = g.kh > 1 and lay.wide is not None and len(lay.wide.phases) == 1
    row = LoopVar(INDEX, "i")
    updates: list[Stmt] = []
    for i in [row] if row_loop else [idx(i) for i in range(g.kh)]:
        for j in range(g.kw):
            tap = _tap(g, lay, i, j)
            at = weights_at + (i * g.kw + j) * lay.width
            loads = [Load(vec, packed, at + (v * LANES)) for v in range(lay.xv)]
            for r in range(rows):
                splat = Splat(vec, Load(arithmetic.scalar, source, starts[r] + tap))
                for v in range(lay.xv):
                    value = arithmetic.update(Ref(vec, acc[r][v]), splat, loads[v])
                    updates.append(Assign(acc[r][v], value))
    if row_loop:
        updates = [For(row.name, g.kh, updates, unroll=False)]
    body.append(For(ch.name, channels, updates, unroll=False))
    for r in range(rows):
        for v in range(lay.xv):
            at = tile_at(conv, lay, b, first + r, idx(v * LANES))
            lanes = panel * lay.width + (v * LANES)
            body.append(Store(tile, at, arithmetic.lanes_result(Ref(vec, acc[r][v]), lanes)))
    return body


def _tap(g: ConvShape, lay: ChannelLayout, i: LExpr, j: int) -> LExpr:
    """Where tap (i, j) starts relative to its pixel's tap (0, 0) in the source."""
    if lay.wide is None:
        return idx(0)
    if isinstance(i, Const):
        return idx(lay.wide.tap(g, int(i.value), j))
    return lay.wide.row_tap(g, i, j)


def macs(conv: Call) -> int:
    g = ConvShape.of(conv)
    return g.n * g.o * g.oh * g.ow * g.c * g.kh * g.kw


def channel_conv(group: Group, anchor: Call, ops: list[str], lay: ChannelLayout) -> ConvKernel:
    """The channel-vector kernel (py) and the epilogue in one loop over
    panels of output channels: each panel's tile is still in cache when the epilogue
    writes its planes of the output from it."""
    g = ConvShape.of(anchor)
    x = anchor.args[0]
    assert isinstance(x, Var)
    special: dict[str, BufferRef] = {}
    scratches: list[tuple[tuple[int, ...], str]] = []
    pad = None
    source = group.buffers[x].name
    if lay.wide is not None:  # padded (and for strides, phase-split) input in scratch 0
        special["xpad"] = BufferRef("scratch", len(scratches))
        pad, padded = phase_kernel(anchor, lay.wide, f"{group.name}_pad")
        scratches.append(padded)
        source = "xpad"
    special["tile"] = BufferRef("scratch", len(scratches))
    scratches.append((tile_shape(anchor, lay), "float32"))
    panel = LoopVar(INDEX, "panel")
    packed = group.buffer_of(Constant(lay.panels))
    stmts = panel_block(anchor, lay, panel, source, packed, "tile")
    stmts += channel_block(group, panel, lay.width, flat_planes=True)
    work, loop = macs(anchor), ("panel", g.o // lay.width)
    return micro_kernel(
        group, anchor, ops, stmts, loop, work, special, scratches, pad, ChannelConv.NAME
    )


def tile_load(group: Group, anchor: Call, lay: ChannelLayout) -> Callable[[Index], LExpr]:
    """Where the epilogue reads the channel-vector convolution's result: the calling
    thread's tile, pixel by pixel (tile_at)."""
    ow = group.out_type.shape[3]
    anchor_t = anchor.checked_type
    assert isinstance(anchor_t, TensorType)

    def load(index: Index) -> LExpr:
        b, o, y, x = index.multi()
        lane = o % lay.width
        pixel = y * ow + x
        return Load(anchor_t.dtype, "tile", tile_at(anchor, lay, b, pixel, lane))

    return load


@dataclass(frozen=True)
class ChannelConv(NativeKernel):
    """The convolution with output channels in the vector lanes, for small feature maps."""

    NAME: ClassVar[str] = "conv/channels"
    layout: ChannelLayout

    def anchor_load(self, group: Group, anchor: Call) -> Callable[[Index], LExpr]:
        return tile_load(group, anchor, self.layout)

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return channel_conv(group, anchor, ops, self.layout)
