"""qnn_conv2d_nchwc on bytes of 16 channels per pixel (kernels "conv/int8-nchwc-depthwise"
and "conv/int8-nchwc-pointwise"; the layouts BlockLayout chooses, rules/builtin/blocked.rules).

Depthwise: depthwise.py's rows, each tap one 16-byte load widened to float32 (bytes
and their products are exact floats, and so are sums of up to EXACT_TAPS of them), less
the input zero point where it is not 0, so a tap outside the map, which the row sweep
leaves out, counts as the zero point it stands for. A row's sums wait in the thread's
row of a scratch; the epilogue reads them as int32.

Pointwise: pointwise.py's panels with int32 accumulators: per step one broadcast
32-bit word of four input channels of a pixel (in NCHW16c data, four consecutive words of
one pixel's 16 bytes; from NCHW data, conv/int8.py's packed words) times the panel's weight
words, four byte products added per lane (VNNI's vpdpbusd), then less each output
channel's zero-point share (zx * sum of its weights: conv/int8.py's offsets). uint8 data only:
vpdpbusd multiplies unsigned bytes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant, Var
from egraph_ir.types import TensorType

from .....llvm.mathlib import host_has_vnni
from .....loop_ir import (
    INDEX,
    LANES,
    THREAD_SLOT,
    Bin,
    Cast,
    Dot4,
    For,
    Kernel,
    LExpr,
    Load,
    LoopVar,
    Shuffle,
    Splat,
    Stmt,
    const,
    idx,
)
from ....group import Group
from ....kinds import BufferRef, ConvKernel
from ....strategy import NativeKernel
from .. import int8 as nchw_int8
from ..channels import MAX_TAPS, panels_of
from ..depthwise_int8 import EXACT_TAPS
from ..epilogue import lanes_epilogue, micro_kernel
from ..shape import VECTOR, BlockedShape, Wide, int8_operands_fit
from .depthwise import RowSums, depthwise_macs, depthwise_rows, depthwise_weights
from .pointwise import (
    PanelReads,
    PanelSums,
    PointwiseLayout,
    blocked_pointwise,
    pointwise_layout,
)

WORDS = f"int32x{LANES}"
BYTES = f"uint8x{LANES}"


def fits(conv: Call) -> bool:
    """A qnn_conv2d_nchwc over uint8 data with constant int8 weights whose zero point is
    0, one constant input zero point, no negative padding, each side NCHW or NCHW16c,
    computed exactly (VNNI)."""
    if not (isinstance(conv.args[0], Var) and int8_operands_fit(conv)):
        return False
    layouts = (conv.attrs["data_layout"], conv.attrs["out_layout"])
    x_t = conv.args[0].checked_type
    assert isinstance(x_t, TensorType)  # int8_operands_fit says so
    return (
        x_t.dtype == "uint8"
        and conv.attrs["pairs"] == "exact"
        and host_has_vnni()
        and all(layout in ("NCHW", f"NCHW{LANES}c") for layout in layouts)
    )


def depthwise_fits(conv: Call) -> bool:
    """Blocked data in and out, one channel per group, sums exact in float32."""
    if not fits(conv):
        return False
    g = BlockedShape.of(conv)
    one_each = int(conv.attrs["groups"]) == g.c == g.o
    return g.data_blocked and g.out_blocked and one_each and g.kh * g.kw <= EXACT_TAPS


def pointwise_fits(conv: Call) -> bool:
    """A 1x1 convolution of one group without stride or padding, one side blocked at
    least (both NCHW is conv/int8.py's work); or any window of one group from NCHW data
    into blocks (an RGB stem), read from the packed words of conv/int8.py's prologue."""
    if not fits(conv) or int(conv.attrs["groups"]) != 1:
        return False
    g = BlockedShape.of(conv)
    plain_1x1 = (g.kh, g.kw, g.sh, g.sw) == (1, 1, 1, 1)
    no_pad = (g.top, g.left, g.bottom, g.right) == (0, 0, 0, 0)
    window_in = not g.data_blocked and g.out_blocked
    return (plain_1x1 and no_pad and (g.data_blocked or g.out_blocked)) or window_in


# ---------------------------------------------------------------- depthwise
@dataclass(frozen=True)
class _ByteRows(RowSums):
    """Input vectors of 16 bytes as float32 less the zero point; a row's sums into the
    calling thread's row of the `rows` scratch."""

    zero_point: int = 0

    def read(self, source: str, at: LExpr) -> LExpr:
        value: LExpr = Cast(VECTOR, Load(BYTES, source, at))
        if self.zero_point:
            value = Bin(
                VECTOR, "sub", value, Splat(VECTOR, const(float(self.zero_point), "float32"))
            )
        return value

    def row(self, row: LExpr, g: BlockedShape) -> LExpr:
        return THREAD_SLOT * g.ow  # one row per thread: its epilogue reads it next


def byte_depthwise(group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
    """A loop over channel blocks, each sweeping its rows; each row's sums in the thread's
    scratch row, then its epilogue from them into the 8-bit (or other) output."""
    g = BlockedShape.of(anchor)
    source = group.buffers[anchor.args[0]].name
    weights = group.buffer_of(Constant(depthwise_weights(anchor)))
    block = LoopVar(INDEX, "blk")
    sums = _ByteRows("rows", nchw_int8.unsigned_zero(anchor))

    def read(p: LExpr, lane: LExpr) -> LExpr:
        at = (THREAD_SLOT * g.ow + p) * LANES + lane
        return Cast("int32", Load("float32", "rows", at), exact=True)

    def after_row(b: LExpr, y: LExpr) -> list[Stmt]:
        row = ((b * g.ob + block) * g.oh + y) * g.ow
        return lanes_epilogue(group, row * LANES, g.ow, y * g.ow, block, b, read)

    stmts = depthwise_rows(anchor, block, source, weights, after_row, sums)
    special = {"rows": BufferRef("scratch", 0)}
    scratches: list[tuple[tuple[int, ...], str]] = [((g.cb, g.ow * LANES), "float32")]
    macs = depthwise_macs(anchor)
    name = Int8BlockedDepthwise.NAME
    return micro_kernel(
        group, anchor, ops, stmts, ("blk", g.cb), macs, special, scratches, None, name
    )


@dataclass(frozen=True)
class Int8BlockedDepthwise(NativeKernel):
    """A depthwise qnn_conv2d_nchwc: 16 channels' bytes per tap, exact float32 sums."""

    NAME: ClassVar[str] = "conv/int8-nchwc-depthwise"
    ANY_RESULT_DTYPE: ClassVar[bool] = True

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return byte_depthwise(group, anchor, ops)


# ---------------------------------------------------------------- pointwise
@dataclass(frozen=True)
class _WordPanel(PanelSums):
    """Panels summing VNNI words into int32, less each channel's zero-point share."""

    vector: str = WORDS
    offsets: str = ""
    packed: Wide | None = None  # NCHW data: conv/int8.py's packed words (this layout)

    @property
    def name(self) -> str:
        return Int8BlockedPointwise.NAME

    def reads(self, g: BlockedShape, b: LExpr, source: str) -> PanelReads:
        pixels = g.oh * g.ow
        if self.packed is None:  # word k of a pixel: bytes 4k .. 4k + 3 of its 16
            cb, k = LoopVar(INDEX, "cb"), LoopVar(INDEX, "k")
            plane = (b * g.cb + cb) * (pixels * LANES) + k * nchw_int8.WORD

            def word(pixel: LExpr, j: int) -> LExpr:
                return Load("int32x1", source, plane + pixel * LANES)

            def loops(body: list[Stmt]) -> Stmt:
                per_block = For("k", LANES // nchw_int8.WORD, body, unroll=False)
                return For("cb", g.cb, [per_block], unroll=False)

            return PanelReads(cb * (LANES // nchw_int8.WORD) + k, word, loops, g.kw)
        return self._packed_reads(g, b, source)

    def _packed_reads(self, g: BlockedShape, b: LExpr, source: str) -> PanelReads:
        """Words from the packed phase planes: every tap unrolled (its plane and offset
        constants) up to MAX_TAPS, else a loop over kernel rows (offsets computed)."""
        wide, taps = self.packed, g.kh * g.kw
        assert wide is not None
        ch, words = LoopVar(INDEX, "ch"), nchw_int8.words(g.c)
        channel = (b * words + ch) * (len(wide.phases) * wide.plane)

        def at(pixel: LExpr, tap: LExpr) -> LExpr:
            y, x = pixel // g.ow, pixel % g.ow
            return Load("int32", source, channel + tap + (y * wide.wp + x))

        def channel_loop(body: list[Stmt]) -> Stmt:
            return For("ch", words, body, unroll=False)

        if taps <= MAX_TAPS:

            def tap(pixel: LExpr, t: int) -> LExpr:
                return at(pixel, idx(wide.tap(g, *divmod(t, g.kw))))

            return PanelReads(ch * taps, tap, channel_loop, taps)
        i = LoopVar(INDEX, "i")

        def rows(body: list[Stmt]) -> Stmt:
            return channel_loop([For("i", g.kh, body, unroll=False)])

        def column(pixel: LExpr, j: int) -> LExpr:
            return at(pixel, wide.row_tap(g, i, j))

        return PanelReads(ch * taps + i * g.kw, column, rows, g.kw)

    def splat(self, value: LExpr) -> LExpr:
        if value.dtype == "int32x1":  # a one-lane load: broadcast it (vpbroadcastd)
            return Shuffle(self.vector, value, value, (0,) * LANES)
        return Splat(self.vector, value)

    def update(self, acc: LExpr, weights: LExpr, splat: LExpr) -> LExpr:
        return Dot4(self.vector, acc, splat, weights)

    def finish(self, acc: LExpr, lanes: LExpr) -> LExpr:
        return Bin(self.vector, "sub", acc, Load(self.vector, self.offsets, lanes))

    def prologue(self, conv: Call, name: str) -> tuple[Kernel | None, tuple[tuple[int, ...], str]]:
        if self.packed is None:
            return None, ((), "")
        shape = nchw_int8.packed_input_shape(conv, self.packed)
        return nchw_int8.pack_kernel(conv, self.packed, name), shape


def word_layout(conv: Call) -> PointwiseLayout:
    """pointwise.py's blocking with the weights as words of four input channels:
    panels (O / W, C / 4, 1, W) int32, output channels padded with zero words."""
    lay = pointwise_layout(conv)
    words, _ = nchw_int8.packed_weights(conv)
    padded = np.zeros((lay.count * lay.width, *words.shape[1:]), np.int32)
    padded[: words.shape[0]] = words
    return dataclasses.replace(lay, panels=panels_of(padded, lay.width))


def word_pointwise(group: Group, anchor: Call, ops: list[str], lay: PointwiseLayout) -> ConvKernel:
    """The float pointwise kernel's loops over words: each channel's zero-point share
    (padded channels: 0) taken off as a block's sums go to the tile."""
    g = BlockedShape.of(anchor)
    offsets = np.zeros(lay.count * lay.width, np.int32)
    offsets[: g.o] = nchw_int8.offsets(anchor)
    packed = None if g.data_blocked else nchw_int8.layout(anchor)
    sums = _WordPanel(offsets=group.buffer_of(Constant(offsets)), packed=packed)
    return blocked_pointwise(group, anchor, ops, lay, sums)


@dataclass(frozen=True)
class Int8BlockedPointwise(NativeKernel):
    """A 1x1 qnn_conv2d_nchwc: output channels in the lanes, VNNI words of input bytes."""

    NAME: ClassVar[str] = "conv/int8-nchwc-pointwise"
    ANY_RESULT_DTYPE: ClassVar[bool] = True
    layout: PointwiseLayout

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return word_pointwise(group, anchor, ops, self.layout)
