"""qnn_conv2d as an integer kernel: u8 activations times s8 weights, summed in int32.

The direct kernel's layout (Wide) with bytes instead of floats: a prologue packs
the padded (phase-split) input as 32-bit words of four consecutive input channels, so
16 output columns of one word are one 64-byte load; the weights are packed at compile
time the same way (four input channels of one output channel and tap per word), and
each step adds, lane by lane, four byte products to the int32 accumulators (VNNI's
vpdpbusd: 64 multiply-adds per instruction where a float32 FMA does 16).

vpdpbusd multiplies unsigned by signed bytes, so the sum computed is
sum(x * w) over the unsigned input x (an int8 input is shifted by 128, its zero point
with it) and the weights w, and the result is sum((x - zx) * w) = sum(x * w) - zx * sum(w)
per output channel: a constant subtracted as the block stores (a weight zero point other
than 0 would need the input's window sums too; such calls keep the float path). Padding
and the channels that fill the last word hold zx, whose share that constant removes, so
the int32 sums are exactly qnn_conv2d's, as ONNX Runtime's QLinearConv computes them.

On small maps the same words feed channels.py's kernel (output channels in the lanes:
channel_layout). Depthwise calls have no four channels to pack together: the direct
kernel's depthwise path reads their bytes as exact floats (depthwise_fits).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant
from egraph_ir.support import register_native_form

from ....loop_ir import (
    INDEX,
    LANES,
    Bin,
    Buffer,
    Cast,
    Dot4,
    For,
    Kernel,
    LExpr,
    Load,
    LoopVar,
    Select,
    Stmt,
    Store,
    clamp,
    const,
    idx,
)
from ...compute.definitions import Index
from ...group import Group
from ...kinds import BufferRef, ConvKernel
from ...strategy import NativeKernel
from .channels import (
    LANE_USE,
    MAX_PLANE,
    MAX_TAPS,
    SMALL_PLANE,
    ChannelLayout,
    blocking,
    lane_use,
    panels_of,
)
from .depthwise_int8 import depthwise_fits
from .direct import direct_block, wide_rows_load
from .epilogue import INT8_MASKED_ROWS, block_epilogue, channel_block, micro_kernel
from .prologue import grid_spans, span
from .shape import (
    Accumulation,
    ConvShape,
    Wide,
    int8_operands_fit,
    integer_sums_fit,
    loop_var,
    sums_by_pairs,
)

WORD = 4  # input channels per 32-bit word


def fits(call: Call) -> bool:
    """A one-group qnn_conv2d this kernel computes (see int8_operands_fit)."""
    return int8_operands_fit(call) and int(call.attrs["groups"]) == 1


SMALL_DEPTHWISE_PLANE = 15 * 15  # the float path's blocked kernel is faster below this


def worth_it(call: Call) -> bool:
    """Taken where the CPU multiplies bytes natively (VNNI's vpdpbusd, AVX2's vpmaddubsw
    where its int16 pairs give the sums the call declares: integer_sums_fit); elsewhere the
    float convolution CanonicalizeQnn writes is faster than widened byte products.
    Depthwise calls on planes of 15 x 15 and more: they read the 8-bit input itself, where
    the float path converts it in a kernel of its own first; on smaller planes (7 x 7, 14 x
    14) the direct kernel's pixels-in-lanes rows waste most lanes, and the float path's
    blocked depthwise kernel (channels in lanes, exact sums too) is faster: EfficientNet-B0
    int8 on Zen 3 25.0 -> 13.3 ms, MobileNetV2 13.8 -> 10.1 ms (interleaved A/B, both
    still ONNX Runtime's bits)."""
    if fits(call) and integer_sums_fit(call, pair_order(call)):
        return True
    g = ConvShape.of(call) if depthwise_fits(call) else None
    return g is not None and g.oh * g.ow >= SMALL_DEPTHWISE_PLANE


def pair_order(call: Call) -> np.ndarray:
    """The weights as the kernel pairs them: (O, kh, kw, C), channel pairs at one tap."""
    w = call.args[1]
    assert isinstance(w, Constant)
    return np.asarray(w.data).transpose(0, 2, 3, 1)


def layout(call: Call) -> Wide:
    """The direct kernel's layout, always through the packed input (the raw one holds
    bytes, not words) and always into scratch rows (the output holds the epilogue's
    8-bit result, not the int32 sums)."""
    return dataclasses.replace(Wide.of(call), pad_free=False, into_out=False)


def channel_layout(call: Call, wide: Wide) -> ChannelLayout:
    """channels.py's blocking (output channels in the lanes) over the packed input words:
    panels of W output channels hold, per input word and tap, W weight words."""
    xv, pr = blocking(ConvShape.of(call))
    packed, _ = packed_weights(call)
    return ChannelLayout(xv, pr, wide, panels_of(packed, xv * LANES))


def channels_worth_it(call: Call, wide: Wide) -> bool:
    """Output channels in the lanes where the direct layout would leave lanes idle, as
    for float32 (worth_it), for kernels wider than 1x1: whole vectors of
    output channels, 2 to MAX_TAPS taps. Measured on real models' int8
    layers (2 threads): 3x3 at 7x7 0.76 of the direct kernel's time, at 14x14 0.95; 1x1
    at 7x7 to 14x14 1.0-1.8x slower (byte sums are 4x cheaper than float ones, so the
    transposing read of the tile weighs more)."""
    g = ConvShape.of(call)
    if g.o % LANES or not 1 < g.kh * g.kw <= MAX_TAPS:
        return False
    plane = g.oh * g.ow
    use = lane_use(call, wide)
    return plane <= SMALL_PLANE or (plane <= MAX_PLANE and use < LANE_USE)


def words(channels: int) -> int:
    return -(-channels // WORD)


def unsigned_zero(call: Call) -> int:
    """The input zero point as the packed (unsigned) bytes hold it."""
    x_zero = call.args[2]
    assert isinstance(x_zero, Constant)
    shift = 128 if x_zero.data.dtype == np.int8 else 0
    return int(x_zero.data.reshape(-1)[0]) + shift


def packed_weights(call: Call) -> tuple[np.ndarray, np.ndarray]:
    """The weights as int32 words (o, input words, kh * kw), four input channels each
    (the last padded with zeros), and per output channel the constant to subtract:
    unsigned input zero point times the sum of its weights."""
    w = call.args[1]
    assert isinstance(w, Constant)
    o, c, kh, kw = w.data.shape
    grid = np.zeros((o, words(c) * WORD, kh * kw), np.int8)
    grid[:, :c] = w.data.reshape(o, c, kh * kw)
    packed = grid.reshape(o, words(c), WORD, kh * kw).transpose(0, 1, 3, 2)
    as_words = np.ascontiguousarray(packed).view("<i4").reshape(o, words(c), kh * kw)
    return as_words, offsets(call)


def offsets(call: Call) -> np.ndarray:
    """Per output channel, the unsigned input zero point times the sum of its weights."""
    w = call.args[1]
    assert isinstance(w, Constant)
    sums = w.data.astype(np.int64).reshape(w.data.shape[0], -1).sum(axis=1)
    return (unsigned_zero(call) * sums).astype(np.int32)


def packed_input_shape(call: Call, lay: Wide) -> tuple[tuple[int, ...], str]:
    """The scratch the prologue fills, as the kernel reads it: words per phase plane."""
    g = ConvShape.of(call)
    return (g.n, words(g.c), len(lay.phases) * lay.plane), "int32"


def pack_kernel(call: Call, lay: Wide, name: str) -> Kernel:
    """xpad[n, word, phase plane, y, x] = the four input channels of the word at the
    padded input's row y * sh + a - top, column x * sw + b - left for phase (a, b), as
    unsigned bytes; the zero point outside the input and past the last channel. Rows and
    columns outside are plain fill loops (prologue.span), the interior a copy
    without bounds checks, which vectorises. Where every phase of the stride grid reads
    the same rows and columns, one nest loops over the phases (a ViT's 16 x 16 patches:
    256 copies of it were a function LLVM took a minute over)."""
    g = ConvShape.of(call)
    c4, planes = words(g.c), len(lay.phases)
    b, word = loop_var("b"), loop_var("word")
    body: list[Stmt] = []
    if (shared := grid_spans(g, lay.phases, lay.rows, lay.wp)) is not None:
        pa, pb = loop_var("pa"), loop_var("pb")
        phase = _phase_copy(call, lay, (b, word), (pa * g.sw + pb, pa, pb), shared, "")
        body = [For(pa.name, g.sh, [For(pb.name, g.sw, phase)])]
    else:
        for k, (pa_k, pb_k) in enumerate(lay.phases):
            rows = span(pa_k - g.top, g.sh, g.h, lay.rows)
            columns = span(pb_k - g.left, g.sw, g.w, lay.wp)
            at_k = (idx(k), idx(pa_k), idx(pb_k))
            body += _phase_copy(call, lay, (b, word), at_k, (rows, columns), str(k))
    nest = For("word", c4, [For("b", g.n, body)], outer=True)
    shape = (g.n, c4, planes * lay.plane, WORD)
    buffers = [Buffer("in0", g.dtype, (g.n, g.c, g.h, g.w)), Buffer("out", "uint8", shape)]
    work = float(g.n * c4 * planes * lay.plane * WORD)
    return Kernel(name, buffers, [nest], c4, work=work, unroll=False)


def _phase_copy(
    call: Call,
    lay: Wide,
    item: tuple[LExpr, LExpr],
    phase: tuple[LExpr, LExpr, LExpr],
    spans: tuple[tuple[int, int], tuple[int, int]],
    tag: str,
) -> list[Stmt]:
    """pack_kernel's loops for phase plane k = (a, b) of item (b, word): the fills and
    the copy of the (first, end) rows and columns the phase reads (prologue.span)."""
    g = ConvShape.of(call)
    fill = const(unsigned_zero(call), "uint8")
    (b, word), (k, pa, pb), ((r0, r1), (c0, c1)) = item, phase, spans
    plane = (b * words(g.c) + word) * len(lay.phases) + k

    def at(row: LExpr, col: LExpr) -> LExpr:
        return ((plane * lay.rows + row) * lay.wp + col) * WORD

    outside = [(0, r0), (r1, lay.rows - r1)]
    body = _fills(f"z{tag}", [(at(idx(y0), idx(0)), n * lay.wp) for y0, n in outside], fill)
    if r1 <= r0:
        return body
    r, col = loop_var(f"r{tag}"), loop_var(f"c{tag}")
    row, column = r + r0, col + c0
    edges = [(at(row, idx(0)), c0), (at(row, idx(c1)), lay.wp - c1)]
    inner = _fills(f"e{tag}", edges, fill)
    y = row * g.sh + (pa + (-g.top))
    x = column * g.sw + (pb + (-g.left))
    if c1 > c0:
        to = at(row, column)
        lanes: list[Stmt] = [
            Store("out", to + v, _byte(g, fill, (b, word, v), y, x)) for v in range(WORD)
        ]
        inner.append(For(col.name, c1 - c0, lanes))
    body.append(For(r.name, r1 - r0, inner))
    return body


def _fills(prefix: str, spans: list[tuple[LExpr, int]], fill: LExpr) -> list[Stmt]:
    """Loops storing `fill` into the words of each (start, words) span."""
    loops: list[Stmt] = []
    for k, (start, count) in enumerate(spans):
        if count > 0:
            z = loop_var(f"{prefix}_{k}")
            loops.append(For(z.name, count * WORD, [Store("out", start + z, fill)]))
    return loops


def _byte(g: ConvShape, fill: LExpr, where: tuple[LExpr, LExpr, int], y: LExpr, x: LExpr) -> LExpr:
    """Input channel word * 4 + lane of item b (where = (b, word, lane)) at (y, x),
    inside the input, as an unsigned byte; the fill past the last channel (only the
    last word has such lanes)."""
    b, word, lane = where
    channel = word * WORD + lane
    exact = g.c % WORD == 0
    plane = b * g.c + (channel if exact else clamp(channel, 0, g.c - 1))
    value = _unsigned(Load(g.dtype, "in0", (plane * g.h + y) * g.w + x))
    return value if exact else Select("uint8", Bin("bool", "lt", channel, idx(g.c)), value, fill)


def _unsigned(value: LExpr) -> LExpr:
    """An input byte as vpdpbusd's unsigned operand: int8 shifted by 128."""
    if value.dtype == "uint8":
        return value
    return Cast("uint8", Bin("int32", "add", Cast("int32", value), const(128, "int32")))


@dataclasses.dataclass(frozen=True)
class ByteWords(Accumulation):
    """direct_block over words of four input channels, by vpdpbusd (loop_ir.Dot4);
    the block stores each sum minus its output channel's zero-point offset."""

    vector: str = f"int32x{LANES}"
    scalar: str = "int32"

    def channels(self, g: ConvShape, groups: int) -> int:
        return words(g.c)

    pairs: bool = False  # byte products added in int16 pairs (loop_ir.Dot4)

    def update(self, acc: LExpr, inputs: LExpr, weight: LExpr) -> LExpr:
        return Dot4(self.vector, acc, inputs, weight, self.pairs)


def macs(call: Call, lay: Wide) -> int:
    """Multiply-adds the kernel issues (padding channels and extra columns included)."""
    g = ConvShape.of(call)
    return g.n * g.o * lay.q * words(g.c) * WORD * g.kh * g.kw


register_native_form("qnn_conv2d", worth_it)  # CanonicalizeQnn keeps these for this kernel


def int8_conv(group: Group, anchor: Call, ops: list[str], lay: Wide) -> ConvKernel:
    """qnn_conv2d by the int8 kernel (py): the input packed as words of four
    unsigned bytes into scratch 0, the direct block over them into the calling thread's
    rows of scratch 1 (int32), and the epilogue (requantize, in the end) per block."""
    g = ConvShape.of(anchor)
    pad = pack_kernel(anchor, lay, f"{group.name}_pack")
    packed, offsets = packed_weights(anchor)
    weight, offset = group.buffer_of(Constant(packed)), group.buffer_of(Constant(offsets))
    special = {"xpad": BufferRef("scratch", 0), "wide": BufferRef("scratch", 1)}
    block = LoopVar(INDEX, "ob")
    arithmetic = ByteWords(offsets=offset, pairs=sums_by_pairs(anchor))
    # output pixels are the wide rows' columns (1x1, whole blocks): the epilogue follows
    # each register block, on columns still in L1, not each block's rows from L2
    by_block = Wide.of(anchor).into_out
    row = lay.xv * LANES if by_block else lay.q  # a register block's tile, or rows
    scratches = [packed_input_shape(anchor, lay), ((g.n, g.o, row), "int32")]
    after = partial(block_epilogue, group, block, lay) if by_block else None
    stmts = direct_block(anchor, lay, block, "xpad", weight, "wide", False, True, arithmetic, after)
    if not by_block:
        stmts += channel_block(group, block, lay.ob, masked_below=INT8_MASKED_ROWS)
    words, loop = macs(anchor, lay) // WORD, ("ob", g.o // lay.ob)
    return micro_kernel(
        group, anchor, ops, stmts, loop, words, special, scratches, pad, Int8Conv.NAME
    )


@dataclass(frozen=True)
class Int8Conv(NativeKernel):
    """qnn_conv2d as u8 x s8 words summed in int32 in the direct layout."""

    NAME: ClassVar[str] = "conv/int8"
    ANY_RESULT_DTYPE: ClassVar[bool] = True
    wide: Wide

    def anchor_load(self, group: Group, anchor: Call) -> Callable[[Index], LExpr]:
        return wide_rows_load(group, self.wide)

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return int8_conv(group, anchor, ops, self.wide)
