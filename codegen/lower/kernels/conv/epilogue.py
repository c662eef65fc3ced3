"""The fused epilogues the convolution kernels end with: per block of output channels
(channel_block), per register block of pixels (block_epilogue), per row of a channel
block of NCHW16c data (lanes_epilogue), and `micro_kernel`, the ConvKernel around a
micro-kernel's statements."""

from __future__ import annotations

from collections.abc import Callable

from egraph_ir.expr import Call
from egraph_ir.types import TensorType

from ....loop_ir import (
    INDEX,
    LANES,
    THREAD_SLOT,
    Buffer,
    For,
    Kernel,
    LExpr,
    Load,
    LoopVar,
    Stmt,
    Store,
    heavy,
)
from ...compute.definitions import Index
from ...group import Group
from ...kinds import BufferRef, ConvKernel, LoopKernel, operand
from .shape import Wide


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
    name: str,
) -> ConvKernel:
    """A micro-kernel convolution: `stmts` inside the thread-split loop over blocks of
    output channels, its scratch buffers, an optional padding prologue; `name` is the
    kernel's NAME."""
    named = zip(special, scratches, strict=True)
    buffers = group.kernel_buffers([Buffer(name, dtype, shape) for name, (shape, dtype) in named])
    work = macs / LANES + group.out_type.size
    nest: list[Stmt] = [For(loop[0], loop[1], stmts, outer=True)]
    kernel = Kernel(group.name, buffers, nest, loop[1], work, unroll=False)
    fused = LoopKernel(group.name, ops, kernel, dict(group.constants), special)
    x, w = anchor.args[:2]
    source, weights = group.fn.params.index(x), operand(w, group.fn.params)
    return ConvKernel(
        group.name, ops, source, weights, pad, None, tuple(scratches), epilogue=fused,
        variant=name.removeprefix("conv/"),
    )  # fmt: skip


def channel_block(
    group: Group,
    block: LExpr,
    ob: int,
    flat_planes: bool = False,
    masked_below: int = 0,
    item: LExpr | None = None,
) -> list[Stmt]:
    """The epilogue (or a plain copy) for output channels block*ob .. block*ob + ob - 1
    of every batch item (or of batch item `item` only).
    With `flat_planes` (the anchor's result is in the output, rows end to end) each
    channel's plane is one loop: a 7x7 plane is 49 elements to vectorise, not 7 rows of 7.
    Rows narrower than `masked_below` run as masked vectors without a scalar remainder
    (faster for an int8 epilogue's row of 28; at 56 the remainder is cheaper)."""
    shape = group.out_type.shape
    n, channels, oh, ow = shape
    p, y, x = (LoopVar(INDEX, k) for k in ("ep", "ey", "ex"))
    b: LExpr = LoopVar(INDEX, "eb") if item is None else item
    channel = block * ob + p

    def items(body: Stmt) -> list[Stmt]:
        return [For("eb", n, [body])] if item is None else [body]

    if flat_planes:
        f = LoopVar(INDEX, "ef")
        plane = b * channels + channel
        rows = [f // ow, f % ow]
        index = Index(shape, multi=[b, channel, *rows], flat=plane * (oh * ow) + f)
        store = Store("out", index.flat(), group.reader(group.fn.body)(index))
        plane_loop = For("ef", oh * ow, [store], unroll=True)
        return [For("ep", ob, items(plane_loop), outline=heavy([store]))]
    index = Index(shape, multi=[b, channel, y, x])
    store = Store("out", index.flat(), group.reader(group.fn.body)(index))
    row = For("ex", ow, [store], unroll=True, vectorize=True, masked=ow < masked_below)
    return [For("ep", ob, items(For("ey", oh, [row])), outline=heavy([store]))]


def block_epilogue(group: Group, block: LExpr, lay: Wide, b: LExpr, q0: LExpr) -> list[Stmt]:
    """The epilogue for one register block's columns q0 .. q0 + XV*16 - 1 of output
    channels block*OB ..., where those columns are output pixels (Wide.into_out); its
    sums wait in the thread's tile of OB rows of XV*16 (conv.direct_block with `after`)."""
    shape = group.out_type.shape
    _, channels, oh, ow = shape
    p, t = LoopVar(INDEX, "cp"), LoopVar(INDEX, "ct")
    channel = block * lay.ob + p
    f = q0 + t
    plane = b * channels + channel
    rows = [f // ow, f % ow]
    index = Index(shape, multi=[b, channel, *rows], flat=plane * (oh * ow) + f)
    anchor_t = group.anchor.checked_type if group.anchor is not None else group.out_type
    assert isinstance(anchor_t, TensorType)
    slot_row = (THREAD_SLOT * shape[0] + b) * lay.ob + p
    column = Load(anchor_t.dtype, "wide", slot_row * (lay.xv * LANES) + t)
    store = Store("out", index.flat(), group.result_at(index, column))  # at f, not (y, x)
    width = lay.xv * LANES
    row = For("ct", width, [store], unroll=True, vectorize=True)
    return [For("cp", lay.ob, [row], outline=heavy([store]))]


INT8_MASKED_ROWS = 2 * LANES  # int8 epilogue rows below this run masked throughout


def lanes_epilogue(
    group: Group,
    start: LExpr,
    pixels: int,
    pixel0: LExpr,
    block: LExpr,
    b: LExpr,
    sums: Callable[[LExpr, LExpr], LExpr] | None = None,
) -> list[Stmt]:
    """The fused ops over `pixels` pixels of the output from flat element `start`: pixels
    from `pixel0` of channel block `block` of item b. The lanes are the inner loop, so a
    per-channel operand (a bias) is one contiguous vector, not a gather. `sums(p, lane)`
    reads the convolution's result (default: where the output holds it, in place)."""
    if group.anchor is group.fn.body and sums is None:
        return []
    shape = group.out_type.shape  # (N, blocks, OH, OW, 16)
    p, lane = LoopVar(INDEX, "ep"), LoopVar(INDEX, "el")
    pixel = pixel0 + p
    rows = [pixel // shape[3], pixel % shape[3]]
    flat = start + p * LANES + lane
    index = Index(shape, multi=[b, block, *rows, lane], flat=flat)
    if sums is None:  # in place: the group reads the anchor from the output by default
        value = group.reader(group.fn.body)(index)
    else:
        value = group.result_at(index, sums(p, lane))
    store = Store("out", index.flat(), value)
    lanes = For("el", LANES, [store], unroll=True, vectorize=True)
    return [For("ep", pixels, [lanes], unroll=False, outline=heavy([store]))]
