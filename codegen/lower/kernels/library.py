"""Kernels around a native or library anchor: the direct convolution and the packed product
(JIT micro-kernels with the epilogue per block), BLAS products and the other convolutions
(1x1 as GEMM, im2col + GEMM, grouped loops) with the epilogue after them."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from egraph_ir.expr import Call, Constant, Expr, Var
from egraph_ir.op._common import size_of
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order

from ...loop_ir import (
    INDEX,
    THREAD_SLOT,
    Bin,
    Buffer,
    Cast,
    For,
    Kernel,
    LExpr,
    Load,
    LoopVar,
    Stmt,
    Store,
    add,
    idx,
    mul,
)
from ..compute.definitions import Index
from ..group import Group
from ..kinds import ConvKernel, JitGemmKernel, LoopKernel
from ..kinds import Ref as BufferRef
from ..select import Unsupported
from .conv import channels as conv_channels
from .conv import direct as conv
from .conv import int8 as conv_int8
from .conv import prologue as conv_prologue
from .gemm import int8 as gemm_int8
from .gemm import packed as gemm


def direct_conv(group: Group, anchor: Call, ops: list[str], wide: conv.Wide) -> ConvKernel:
    """The direct micro-kernel and the epilogue in one loop over blocks of output
    channels: each block's rows are still in cache when its epilogue reads them."""
    lay, g = wide, conv.ConvShape.of(anchor)
    x, w = anchor.args[:2]
    if not isinstance(x, Var):
        raise Unsupported("conv2d of a constant input")
    special: dict[str, BufferRef] = {}
    scratches: list[tuple[tuple[int, ...], str]] = []
    pad = None
    source = group.buffers[x].name
    groups = int(anchor.attrs["groups"])
    # depthwise: each block reads one input channel, padded by the block itself
    private = not lay.pad_free and g.c == groups and g.o // groups == lay.ob
    block = LoopVar(INDEX, "ob")
    stmts: list[Stmt] = []
    if not lay.pad_free:  # padded (and for strides, phase-split) input in scratch 0
        special["xpad"] = BufferRef("scratch", len(scratches))
        if private:
            stmts = conv_prologue.private_copy(anchor, lay, block, source, "xpad")
            scratches.append(conv_prologue.phase_shape(anchor, lay))
        else:
            pad, padded = conv_prologue.phase_kernel(anchor, lay, f"{group.name}_pad")
            scratches.append(padded)
        source = "xpad"
    dest = "out"
    if not lay.into_out:  # each block's rows in the calling thread's slot
        dest, special["wide"] = "wide", BufferRef("scratch", len(scratches))
        scratches.append(((g.n, g.o, lay.q), "float32"))
    weight = group.buffer_of(w)
    stmts += conv.direct_block(anchor, lay, block, source, weight, dest, private, not lay.into_out)
    if not (lay.into_out and anchor is group.fn.body):
        stmts += channel_block(group, block, lay.ob, flat_planes=lay.into_out)
    macs = conv.direct_macs(anchor, lay)
    loop = ("ob", g.o // lay.ob)
    return micro_kernel(group, anchor, ops, stmts, loop, macs, special, scratches, pad, "direct")


INT8_MASKED_ROWS = 2 * conv.LANES  # int8 epilogue rows below this run masked throughout


def int8_conv(group: Group, anchor: Call, ops: list[str], lay: conv.Wide) -> ConvKernel:
    """qnn_conv2d by the int8 kernel (conv_int8.py): the input packed as words of four
    unsigned bytes into scratch 0, the direct block over them into the calling thread's
    rows of scratch 1 (int32), and the epilogue (requantize, in the end) per block."""
    g = conv.ConvShape.of(anchor)
    pad = conv_int8.pack_kernel(anchor, lay, f"{group.name}_pack")
    packed, offsets = conv_int8.packed_weights(anchor)
    weight, offset = group.buffer_of(Constant(packed)), group.buffer_of(Constant(offsets))
    special = {"xpad": BufferRef("scratch", 0), "wide": BufferRef("scratch", 1)}
    block = LoopVar(INDEX, "ob")
    arithmetic = conv_int8.ByteWords(offsets=offset)
    # output pixels are the wide rows' columns (1x1, whole blocks): the epilogue follows
    # each register block, on columns still in L1, not each block's rows from L2
    by_block = conv.Wide.of(anchor).into_out
    row = lay.xv * conv.LANES if by_block else lay.q  # a register block's tile, or rows
    scratches = [conv_int8.packed_input_shape(anchor, lay), ((g.n, g.o, row), "int32")]
    after = partial(block_epilogue, group, block, lay) if by_block else None
    stmts = conv.direct_block(
        anchor, lay, block, "xpad", weight, "wide", False, True, arithmetic, after
    )
    if not by_block:
        stmts += channel_block(group, block, lay.ob, masked_below=INT8_MASKED_ROWS)
    macs, loop = conv_int8.macs(anchor, lay) // conv_int8.WORD, ("ob", g.o // lay.ob)
    return micro_kernel(group, anchor, ops, stmts, loop, macs, special, scratches, pad, "int8")


def int8_channel_conv(
    group: Group, anchor: Call, ops: list[str], lay: conv_channels.ChannelLayout
) -> ConvKernel:
    """qnn_conv2d with output channels in the lanes (conv_channels.py over the packed
    input words of conv_int8.py): the int32 tile per panel, then its epilogue."""
    g = conv.ConvShape.of(anchor)
    assert lay.wide is not None
    pad = conv_int8.pack_kernel(anchor, lay.wide, f"{group.name}_pack")
    packed = group.buffer_of(Constant(lay.panels))
    offset = group.buffer_of(Constant(conv_int8.offsets(anchor)))
    special = {"xpad": BufferRef("scratch", 0), "tile": BufferRef("scratch", 1)}
    tile = (conv_channels.tile_shape(anchor, lay), "int32")
    scratches = [conv_int8.packed_input_shape(anchor, lay.wide), tile]
    panel = LoopVar(INDEX, "panel")
    arithmetic = conv_int8.ByteWords(offsets=offset)
    stmts = conv_channels.panel_block(anchor, lay, panel, "xpad", packed, "tile", arithmetic)
    stmts += channel_block(group, panel, lay.width, flat_planes=True)
    macs, loop = conv_channels.macs(anchor) // conv_int8.WORD, ("panel", g.o // lay.width)
    return micro_kernel(
        group, anchor, ops, stmts, loop, macs, special, scratches, pad, "int8-channels"
    )


def byte_depthwise(group: Group, anchor: Call, ops: list[str], lay: conv.Wide) -> ConvKernel:
    """A depthwise qnn_conv2d: each block copies its one input channel into the calling
    thread's slot as float32 (bytes are exact floats; padding holds the zero point), the
    float direct block sums the products exactly and subtracts the zero-point offset, and
    the epilogue reads the sums as int32 (conv_int8.depthwise_fits)."""
    g, x = conv.ConvShape.of(anchor), anchor.args[0]
    assert isinstance(x, Var)
    weights, offsets = conv_int8.depthwise_weights(anchor)
    weight, offset = group.buffer_of(Constant(weights)), group.buffer_of(Constant(offsets))
    special = {"xpad": BufferRef("scratch", 0), "wide": BufferRef("scratch", 1)}
    plane, _ = conv_prologue.phase_shape(anchor, lay)
    scratches = [(plane, "float32"), ((g.n, g.o, lay.q), "float32")]
    block, source = LoopVar(INDEX, "ob"), group.buffers[x].name
    fill = conv_int8.zero_point(anchor)
    stmts = conv_prologue.private_copy(anchor, lay, block, source, "xpad", fill)
    arithmetic = conv.Accumulation(offsets=offset)
    stmts += conv.direct_block(anchor, lay, block, "xpad", weight, "wide", True, True, arithmetic)
    stmts += channel_block(group, block, lay.ob, masked_below=INT8_MASKED_ROWS)
    macs, loop = conv.direct_macs(anchor, lay), ("ob", g.o // lay.ob)
    return micro_kernel(
        group, anchor, ops, stmts, loop, macs, special, scratches, None, "int8-depthwise"
    )


def channel_conv(
    group: Group, anchor: Call, ops: list[str], lay: conv_channels.ChannelLayout
) -> ConvKernel:
    """The channel-vector kernel (conv_channels.py) and the epilogue in one loop over
    panels of output channels: each panel's tile is still in cache when the epilogue
    writes its planes of the output from it."""
    g = conv.ConvShape.of(anchor)
    x = anchor.args[0]
    assert isinstance(x, Var)
    special: dict[str, BufferRef] = {}
    scratches: list[tuple[tuple[int, ...], str]] = []
    pad = None
    source = group.buffers[x].name
    if lay.wide is not None:  # padded (and for strides, phase-split) input in scratch 0
        special["xpad"] = BufferRef("scratch", len(scratches))
        pad, padded = conv_prologue.phase_kernel(anchor, lay.wide, f"{group.name}_pad")
        scratches.append(padded)
        source = "xpad"
    special["tile"] = BufferRef("scratch", len(scratches))
    scratches.append((conv_channels.tile_shape(anchor, lay), "float32"))
    panel = LoopVar(INDEX, "panel")
    packed = group.buffer_of(Constant(lay.panels))
    stmts = conv_channels.panel_block(anchor, lay, panel, source, packed, "tile")
    stmts += channel_block(group, panel, lay.width, flat_planes=True)
    macs, loop = conv_channels.macs(anchor), ("panel", g.o // lay.width)
    return micro_kernel(group, anchor, ops, stmts, loop, macs, special, scratches, pad, "channels")


def micro_kernel(
    group: Group,
    anchor: Call,
    ops: list[str],
    stmts: list[Stmt],
    loop: tuple[str, int],
    macs: int,
    special: dict[str, BufferRef],
    scratches: list[tuple[tuple[int, ...], str]],
    pad: Kernel | None,
    variant: str,
) -> ConvKernel:
    """A micro-kernel convolution: `stmts` inside the thread-split loop over blocks of
    output channels, its scratch buffers, an optional padding prologue."""
    named = zip(special, scratches, strict=True)
    buffers = group.kernel_buffers([Buffer(name, dtype, shape) for name, (shape, dtype) in named])
    work = macs / conv.LANES + size_of(group.out_type.shape)
    nest: list[Stmt] = [For(loop[0], loop[1], stmts, outer=True)]
    kernel = Kernel(group.name, buffers, nest, loop[1], work, unroll=False)
    fused = LoopKernel(group.name, ops, kernel, dict(group.constants), special)
    x, w = anchor.args[:2]
    source, weights = group.fn.params.index(x), operand(w, group.fn.params)
    return ConvKernel(
        group.name, ops, source, weights, pad, None, tuple(scratches), epilogue=fused,
        variant=variant,
    )  # fmt: skip


def tile_load(
    group: Group, anchor: Call, lay: conv_channels.ChannelLayout
) -> Callable[[Index], LExpr]:
    """Where the epilogue reads the channel-vector convolution's result: the calling
    thread's tile, pixel by pixel (conv_channels.tile_at)."""
    ow = group.out_type.shape[3]
    anchor_t = anchor.checked_type
    assert isinstance(anchor_t, TensorType)

    def load(index: Index) -> LExpr:
        b, o, y, x = index.multi()
        lane = Bin(INDEX, "rem", o, idx(lay.width))
        pixel = add(mul(y, idx(ow)), x)
        return Load(anchor_t.dtype, "tile", conv_channels.tile_at(anchor, lay, b, pixel, lane))

    return load


def packed_gemm(group: Group, anchor: Call, ops: list[str], p: gemm.Packed) -> LoopKernel:
    """The packed-weights micro-kernel and the epilogue, one column panel at a time."""
    panel = LoopVar(INDEX, "panel")
    a = group.buffers[anchor.args[0]].name
    stmts = gemm.panel_block(p, panel, a, group.buffer_of(Constant(p.panels)), "out")
    if anchor is not group.fn.body:
        stmts += panel_epilogue(group, panel, p)
    return _gemm_kernel(group, ops, p, stmts)


def _gemm_kernel(
    group: Group, ops: list[str], p: gemm.Packed, stmts: list[Stmt], int32_sums: bool = False
) -> JitGemmKernel:
    """The panel loop the threads share around `stmts`; with `int32_sums` an (M, N) int32
    scratch "acc" the panels sum into before their epilogue."""
    scratches = (((p.m, p.n), "int32"),) if int32_sums else ()
    buffers = group.kernel_buffers([Buffer("acc", "int32", (p.m, p.n))] if int32_sums else [])
    panels = p.n // p.width
    work = p.macs / gemm.LANES + size_of(group.out_type.shape)
    nest: list[Stmt] = [For("panel", panels, stmts, outer=True)]
    kernel = Kernel(group.name, buffers, nest, panels, work, unroll=False)
    special = {"acc": BufferRef("scratch", 0)} if int32_sums else {}
    variant = "int8" if int32_sums else ""
    constants = dict(group.constants)
    return JitGemmKernel(group.name, ops, kernel, constants, special, scratches, variant)


def int8_packed_gemm(
    group: Group, anchor: Call, ops: list[str], p: gemm.Packed, sums: np.ndarray
) -> LoopKernel:
    """qnn_matmul / qnn_dense by byte words (gemm_int8.py) into an int32 scratch (the
    output holds the epilogue's result), the epilogue one panel at a time. The activations
    are read as words: their buffer is declared int32 here, so the group may read them
    nowhere else."""
    a, a_zero = anchor.args[0], anchor.args[2]
    assert isinstance(a, Var)
    reads = [n for n in post_order(group.fn.body) if isinstance(n, Call) and a in n.args]
    if reads != [anchor]:
        raise Unsupported("the quantised activations are read beside the int8 product")
    a_buffer = group.buffers[a]
    group.buffers[a] = Buffer(a_buffer.name, "int32", (p.m, p.k))
    zero = group.buffer_of(a_zero if isinstance(a_zero, Var) else _one_element(a_zero))
    arithmetic = gemm_int8.ByteProduct(offsets=group.buffer_of(Constant(sums)), zero=zero)
    panel = LoopVar(INDEX, "panel")
    packed = group.buffer_of(Constant(p.panels))
    stmts = gemm.panel_block(p, panel, a_buffer.name, packed, "acc", arithmetic)
    stmts += panel_epilogue(group, panel, p, sums="acc")
    return _gemm_kernel(group, ops, p, stmts, int32_sums=True)


def _one_element(e: Expr) -> Constant:
    """A scalar constant as a one-element buffer (scalar constants are inlined, not
    buffers)."""
    assert isinstance(e, Constant)
    return Constant(np.asarray(e.data).reshape(1))


def panel_epilogue(
    group: Group, panel: LExpr, p: gemm.Packed, sums: str | None = None
) -> list[Stmt]:
    """The epilogue over the columns of one panel, every row. With `sums` (an int8
    product's int32 scratch, (M, p.n)) the anchor is read from there; where p.n is the
    output's width rounded up to whole vectors, the last panel's extra columns redo the
    output's last one (the same value stored again: a loop needs no bounds test)."""
    shape = group.out_type.shape
    n = shape[-1]
    m, j = LoopVar(INDEX, "em"), LoopVar(INDEX, "ej")
    column: LExpr = add(mul(panel, idx(p.width)), j)
    if n != p.n:
        column = Bin(INDEX, "min", column, idx(n - 1))
    lead = Index(shape[:-1], flat=m).multi() if len(shape) > 2 else [m]
    index = Index(shape, multi=[*lead, column], flat=add(mul(m, idx(n)), column))
    if sums is None:
        value = group.reader(group.fn.body)(index)
    else:
        value = group.result_at(index, Load("int32", sums, add(mul(m, idx(p.n)), column)))
    store = Store("out", index.flat(), value)
    return [For("em", p.m, [For("ej", p.width, [store])])]


def channel_block(
    group: Group, block: LExpr, ob: int, flat_planes: bool = False, masked_below: int = 0
) -> list[Stmt]:
    """The epilogue (or a plain copy) for output channels block*ob .. block*ob + ob - 1.
    With `flat_planes` (the anchor's result is in the output, rows end to end) each
    channel's plane is one loop: a 7x7 plane is 49 elements to vectorise, not 7 rows of 7.
    Rows narrower than `masked_below` run as masked vectors without a scalar remainder
    (an int8 epilogue's row of 28: 178 -> 142 us; at 56 the remainder is cheaper)."""
    shape = group.out_type.shape
    n, channels, oh, ow = shape
    p, b, y, x = (LoopVar(INDEX, k) for k in ("ep", "eb", "ey", "ex"))
    channel = add(mul(block, idx(ob)), p)
    if flat_planes:
        f = LoopVar(INDEX, "ef")
        plane = add(mul(b, idx(channels)), channel)
        rows = [Bin(INDEX, "div", f, idx(ow)), Bin(INDEX, "rem", f, idx(ow))]
        index = Index(shape, multi=[b, channel, *rows], flat=add(mul(plane, idx(oh * ow)), f))
        store = Store("out", index.flat(), group.reader(group.fn.body)(index))
        return [For("ep", ob, [For("eb", n, [For("ef", oh * ow, [store], unroll=True)])])]
    index = Index(shape, multi=[b, channel, y, x])
    store = Store("out", index.flat(), group.reader(group.fn.body)(index))
    row = For("ex", ow, [store], unroll=True, vectorize=True, masked=ow < masked_below)
    return [For("ep", ob, [For("eb", n, [For("ey", oh, [row])])])]


def block_epilogue(group: Group, block: LExpr, lay: conv.Wide, b: LExpr, q0: LExpr) -> list[Stmt]:
    """The epilogue for one register block's columns q0 .. q0 + XV*16 - 1 of output
    channels block*OB ..., where those columns are output pixels (Wide.into_out); its
    sums wait in the thread's tile of OB rows of XV*16 (conv.direct_block with `after`)."""
    shape = group.out_type.shape
    _, channels, oh, ow = shape
    p, t = LoopVar(INDEX, "cp"), LoopVar(INDEX, "ct")
    channel = add(mul(block, idx(lay.ob)), p)
    f = add(q0, t)
    plane = add(mul(b, idx(channels)), channel)
    rows = [Bin(INDEX, "div", f, idx(ow)), Bin(INDEX, "rem", f, idx(ow))]
    index = Index(shape, multi=[b, channel, *rows], flat=add(mul(plane, idx(oh * ow)), f))
    anchor_t = group.anchor.checked_type if group.anchor is not None else group.out_type
    assert isinstance(anchor_t, TensorType)
    slot_row = add(mul(add(mul(THREAD_SLOT, idx(shape[0])), b), idx(lay.ob)), p)
    column = Load(anchor_t.dtype, "wide", add(mul(slot_row, idx(lay.xv * conv.LANES)), t))
    store = Store("out", index.flat(), group.result_at(index, column))  # at f, not (y, x)
    width = lay.xv * conv.LANES
    return [For("cp", lay.ob, [For("ct", width, [store], unroll=True, vectorize=True)])]


def conv_kernel(
    group: Group, anchor: Call, ops: list[str], epilogue: LoopKernel | None
) -> ConvKernel:
    """The convolutions the direct micro-kernel does not take: a 1x1 as a GEMM on the
    input, float64 as a GEMM over JIT im2col columns, the rest (grouped float64 or
    float16, negative padding) as direct loops over the padded input."""
    if not isinstance(anchor.args[0], Var):
        raise Unsupported("conv2d of a constant input")
    source = group.fn.params.index(anchor.args[0])
    weights = operand(anchor.args[1], group.fn.params)
    kernel = partial(ConvKernel, group.name, ops, source, weights, epilogue=epilogue)
    if conv.pointwise(anchor):
        return kernel(None, None, gemm=conv.pointwise_product(anchor), variant="gemm")
    if conv.columns_fit(anchor):
        columns, scratch = conv_prologue.im2col_kernel(anchor, f"{group.name}_im2col")
        return kernel(columns, None, (scratch,), conv.columns_product(anchor), variant="im2col")
    pad, scratch = conv_prologue.pad_kernel(anchor, f"{group.name}_pad")
    grouped = conv_prologue.grouped_kernel(anchor, f"{group.name}_conv")
    return kernel(pad, grouped, (scratch,), variant="grouped")


def wide_rows_load(group: Group, wide: conv.Wide, stored: str = "") -> Callable[[Index], LExpr]:
    """Where the epilogue reads the direct convolution's result: a block's rows in the
    calling thread's slot of scratch (conv.direct_block, private_dest), or the output.
    `stored`: the rows' dtype where it is not the anchor's (exact integer sums held in
    float32, read as int32)."""

    anchor_t = group.anchor.checked_type if group.anchor is not None else group.out_type
    assert isinstance(anchor_t, TensorType)

    def load(index: Index) -> LExpr:
        b, o, y, x = index.multi()
        n, ob = group.out_type.shape[0], wide.ob
        p = Bin(INDEX, "rem", o, idx(ob)) if ob > 1 else idx(0)
        row = add(mul(add(mul(THREAD_SLOT, idx(n)), b), idx(ob)), p)
        start = add(mul(row, idx(wide.q)), mul(y, idx(wide.wp)))
        value = Load(stored or anchor_t.dtype, "wide", add(start, x))
        return Cast(anchor_t.dtype, value, exact=True) if stored else value

    def from_out(index: Index) -> LExpr:
        return Load(group.out.dtype, "out", index.flat())

    return from_out if wide.into_out else load


def operand(x: Expr, params: tuple[Var, ...]) -> int | np.ndarray:
    """A library argument: the index of a group parameter, or a constant array."""
    if isinstance(x, Constant):
        return np.ascontiguousarray(x.data)
    assert isinstance(x, Var)
    return params.index(x)
