"""conv2d in JIT code: every form runs natively, through one of four kernels.

- Direct micro-kernel (float32; any stride, groups, depthwise, dilation, padding, batch):
  the input is padded — and for strides split into phase planes — into scratch, then each
  step keeps an OB x XV block of 16-lane accumulators in registers (OB output channels
  times XV*16 output columns) and sweeps the C*KH*KW reduction, loading each input vector
  once for OB fused multiply-adds (~160 GFLOP/s on one core). Output rows are as wide as
  the (phase) input rows, so every tap is a contiguous load; the fused epilogue drops the
  extra columns (codegen/lower/: direct_conv). A block's wide rows live in the calling
  thread's slot of scratch (THREAD_SLOT), and a depthwise block pads the one channel it
  reads into its slot itself, so neither goes out to memory and back. A 1x1 convolution
  whose rows split into whole register blocks reads its input directly and writes NCHW
  directly; others (7x7, 14x14) take wide rows too, which beats a GEMM with that few
  columns.
- Other 1x1 without stride or padding (float64): the input already is the column
  matrix; a GEMM.
- Other one-group float convolutions (float64): a JIT im2col into scratch, then one GEMM
  per batch item.
- Other grouped convolutions (float64, float16): padding into scratch, then direct loops
  that accumulate each output row in place (grouped_kernel).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from egraph_ir.expr import Call, Var
from egraph_ir.types import TensorType

from ....loop_ir import (
    INDEX,
    LANES,
    THREAD_SLOT,
    Assign,
    Cast,
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
from ....runtime.blas import Product
from ...compute.definitions import Index
from ...group import Group
from ...kinds import BufferRef, ConvKernel, Unsupported
from ...strategy import NativeKernel
from .epilogue import channel_block, micro_kernel
from .prologue import phase_kernel, phase_shape, private_copy
from .shape import (
    FLOAT_SUMS,
    Accumulation,
    ConvShape,
    Wide,
    loop_var,
    zero,
)


def columns_fit(conv: Call) -> bool:
    """JIT im2col: one group, a float input that is a parameter of the group."""
    t = conv.args[0].checked_type
    return (
        conv.attrs["groups"] == 1
        and isinstance(conv.args[0], Var)
        and isinstance(t, TensorType)
        and t.dtype in ("float32", "float64")
    )


def direct_fits(conv: Call) -> bool:
    """The micro-kernel: float32, any stride, groups, dilation and padding."""
    g = ConvShape.of(conv)
    return (
        isinstance(conv.args[0], Var)
        and g.dtype == "float32"
        and min(g.top, g.left, g.bottom, g.right) >= 0
    )


def pointwise(conv: Call) -> bool:
    """A 1x1 convolution without stride or padding: the input already is the columns."""
    g = ConvShape.of(conv)
    no_pad = (g.top, g.left, g.bottom, g.right) == (0, 0, 0, 0)
    return columns_fit(conv) and (g.kh, g.kw, g.sh, g.sw) == (1, 1, 1, 1) and no_pad


def pointwise_product(conv: Call) -> Product:
    """out[b] (O, H*W) = w (O, C) @ x[b] (C, H*W), one GEMM per batch item."""
    g = ConvShape.of(conv)
    hw = g.h * g.w
    items = tuple((0, b * g.c * hw, b * g.o * hw) for b in range(g.n))
    return Product(g.dtype, g.o, hw, g.c, False, False, items)


def columns_product(conv: Call) -> Product:
    """out[b] (O, oh*ow) = w (O, C*kh*kw) @ columns[b] (C*kh*kw, oh*ow)."""
    g = ConvShape.of(conv)
    k, spatial = g.c * g.kh * g.kw, g.oh * g.ow
    items = tuple((0, b * k * spatial, b * g.o * spatial) for b in range(g.n))
    return Product(g.dtype, g.o, spatial, k, False, False, items)


def direct_block(
    conv: Call,
    lay: Wide,
    ob_: LExpr,
    source: str,
    weight: str,
    dest: str,
    private_source: bool = False,
    private_dest: bool = False,
    arithmetic: Accumulation = FLOAT_SUMS,
    after: Callable[[LExpr, LExpr], list[Stmt]] | None = None,
    one_item: LExpr | None = None,
) -> list[Stmt]:
    """One block of OB output channels (ob_ counts blocks), for every batch item (or
    for batch item `one_item` only):
    dest[n, o, q] = sum over c, i, j of w[o, c, i, j] * source[n, g*cg + c, tap(i, j) + q],
    where source holds each channel's phase planes (the padded input, or the input).
    Private buffers are the calling thread's slot instead (THREAD_SLOT): the source holds
    the block's one input channel (`private_copy`), dest the block's OB rows, which its
    epilogue reads next (the block's rows stay in cache, whatever the layer's size).
    `after(b, q0)`: statements run after each register block, whose columns start at q0
    (an epilogue over just those columns, while they are in L1); dest then holds only
    that register block, OB rows of XV*16 (kernels/conv/epilogue.py: block_epilogue)."""
    g = ConvShape.of(conv)
    groups = int(conv.attrs["groups"])
    cg, og = arithmetic.channels(g, groups), g.o // groups
    kh, kw = g.kh, g.kw
    ob, xv, q = lay.ob, lay.xv, lay.q
    vec = arithmetic.vector
    qb, ch = loop_var("qb"), loop_var("ch")
    b = loop_var("b") if one_item is None else one_item
    first = ob_ * ob
    group = first if og == 1 else first // og
    channel = group * cg + ch
    per_item = cg * groups  # input channels (or words of them) of one batch item
    item = THREAD_SLOT * g.n + b if private_source else b * per_item + channel
    base = item * (len(lay.phases) * lay.plane) + qb * (xv * LANES)
    body: list[Stmt] = [Declare(f"acc{p}_{k}", zero(vec)) for p in range(ob) for k in range(xv)]
    # the weights of output channel first + p, input channel ch: one base per p, shared
    weights = [(first + p) * (cg * kh * kw) + ch * (kh * kw) for p in range(ob)]
    # taps unrolled (LLVM does not unroll these loops); a kernel row loop stays for large
    # kernels (7x7), where unrolling every tap only costs compile time
    unrolled = kh * kw <= 16
    row_var = loop_var("i")
    updates: list[Stmt] = []
    for i in range(kh) if unrolled else [0]:
        for j in range(kw):
            if unrolled:
                offset: LExpr = idx(lay.tap(g, i, j))
                tap: LExpr = idx(i * kw + j)
            else:
                offset, tap = lay.row_tap(g, row_var, j), row_var * kw + j
            start = base + offset
            loads = [Load(vec, source, start + (k * LANES)) for k in range(xv)]
            for p in range(ob):
                splat = Splat(vec, Load(arithmetic.scalar, weight, weights[p] + tap))
                for k in range(xv):
                    acc = f"acc{p}_{k}"
                    value = arithmetic.update(Ref(vec, acc), loads[k], splat)
                    updates.append(Assign(acc, value))
    if not unrolled:
        updates = [For("i", kh, updates, unroll=False)]
    body.append(For("ch", cg, updates, unroll=False))
    q0 = qb * (xv * LANES)
    for p in range(ob):
        if private_dest:  # the thread's rows: OB for each item, or OB for its one item
            row = (THREAD_SLOT * g.n + b) * ob + p if one_item is None else THREAD_SLOT * ob + p
        else:
            row = b * g.o + (first + p)
        # `after` reads the tile at once: q-long rows left 4.8 MB dirty in L1 (16 -> 96 ch)
        out_at = row * (xv * LANES) if after is not None else row * q + q0
        for k in range(xv):
            value = arithmetic.result(Ref(vec, f"acc{p}_{k}"), first + p)
            body.append(Store(dest, out_at + (k * LANES), value))
    if after is not None:
        body += after(b, q0)
    rows = For("qb", q // (xv * LANES), body)
    return [rows] if one_item is not None else [For("b", g.n, [rows])]


def pads_own_channel(conv: Call, lay: Wide) -> bool:
    """Depthwise blocks read one input channel each, padded by the block itself."""
    g = ConvShape.of(conv)
    groups = int(conv.attrs["groups"])
    return not lay.pad_free and g.c == groups and g.o // groups == lay.ob


def splits_items(conv: Call, lay: Wide) -> bool:
    """Does the direct kernel split its work into (batch item, channel block) pairs? Where
    the batch has several items, except depthwise blocks that pad their own channel."""
    return ConvShape.of(conv).n > 1 and not pads_own_channel(conv, lay)


def direct_macs(conv: Call, lay: Wide) -> int:
    g = ConvShape.of(conv)
    return g.n * g.o * lay.q * (g.c // int(conv.attrs["groups"])) * g.kh * g.kw


def direct_conv(group: Group, anchor: Call, ops: list[str], wide: Wide) -> ConvKernel:
    """The direct micro-kernel and the epilogue in one loop over blocks of output
    channels (of each batch item, splits_items): each block's rows are still in cache
    when its epilogue reads them."""
    lay, g = wide, ConvShape.of(anchor)
    x, w = anchor.args[:2]
    if not isinstance(x, Var):
        raise Unsupported("conv2d of a constant input")
    special: dict[str, BufferRef] = {}
    scratches: list[tuple[tuple[int, ...], str]] = []
    pad = None
    source = group.buffers[x].name
    private = pads_own_channel(anchor, lay)
    blocks = g.o // lay.ob
    # a batch is split into (item, block) pairs, the blocks of an item in turn: all of
    # them read the item's input, which stays in cache (blocks outside items read the
    # whole batch's input once per block: 3x3/2 64 -> 128 at batch 8 ran at 7 GFLOP/s)
    work = LoopVar(INDEX, "ob")
    by_item = splits_items(anchor, lay)
    block = work % blocks if by_item else work
    item = work // blocks if by_item else None
    stmts: list[Stmt] = []
    if not lay.pad_free:  # padded (and for strides, phase-split) input in scratch 0
        special["xpad"] = BufferRef("scratch", len(scratches))
        if private:
            stmts = private_copy(anchor, lay, block, source, "xpad")
            scratches.append(phase_shape(anchor, lay))
        else:
            pad, padded = phase_kernel(anchor, lay, f"{group.name}_pad")
            scratches.append(padded)
        source = "xpad"
    dest = "out"
    if not lay.into_out:  # each block's rows in the calling thread's slot
        dest, special["wide"] = "wide", BufferRef("scratch", len(scratches))
        scratches.append(((g.n, g.o, lay.q), "float32"))
    weight = group.buffer_of(w)
    stmts += direct_block(
        anchor, lay, block, source, weight, dest, private, not lay.into_out, one_item=item
    )
    if not (lay.into_out and anchor is group.fn.body):
        stmts += channel_block(group, block, lay.ob, flat_planes=lay.into_out, item=item)
    macs = direct_macs(anchor, lay)
    loop = ("ob", blocks * (g.n if by_item else 1))
    return micro_kernel(
        group, anchor, ops, stmts, loop, macs, special, scratches, pad, DirectConv.NAME
    )


def wide_rows_load(
    group: Group, wide: Wide, stored: str = "", one_item: bool = False
) -> Callable[[Index], LExpr]:
    """Where the epilogue reads the direct convolution's result: a block's rows in the
    calling thread's slot of scratch (direct_block, private_dest), or the output.
    `stored`: the rows' dtype where it is not the anchor's (exact integer sums held in
    float32, read as int32); `one_item`: the slot holds one item's rows (splits_items)."""

    anchor_t = group.anchor.checked_type if group.anchor is not None else group.out_type
    assert isinstance(anchor_t, TensorType)

    def load(index: Index) -> LExpr:
        b, o, y, x = index.multi()
        n, ob = group.out_type.shape[0], wide.ob
        p = o % ob if ob > 1 else idx(0)
        row = THREAD_SLOT * ob + p if one_item else (THREAD_SLOT * n + b) * ob + p
        start = row * wide.q + y * wide.wp
        value = Load(stored or anchor_t.dtype, "wide", start + x)
        return Cast(anchor_t.dtype, value, exact=True) if stored else value

    def from_out(index: Index) -> LExpr:
        return Load(group.out.dtype, "out", index.flat())

    return from_out if wide.into_out else load


@dataclass(frozen=True)
class DirectConv(NativeKernel):
    """The register-blocked direct convolution with its epilogue per block of channels."""

    NAME: ClassVar[str] = "conv/direct"
    wide: Wide

    def anchor_load(self, group: Group, anchor: Call) -> Callable[[Index], LExpr]:
        return wide_rows_load(group, self.wide, one_item=splits_items(anchor, self.wide))

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return direct_conv(group, anchor, ops, self.wide)
