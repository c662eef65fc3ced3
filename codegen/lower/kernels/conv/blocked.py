"""Kernels of conv2d_nchwc (codegen/lower/kernels/conv/nchwc.py) with their fused epilogue. A
depthwise kernel's thread owns its channel blocks: it stores a row's sums in the output and the
epilogue rewrites them in place while they are in L1. A pointwise kernel's threads may share a panel
(its pixels cut into parts), so a register block's sums go to the thread's tile and the epilogue
writes the output from there: a block two parts compute (where the parts do not divide evenly) is
written twice with the same values, never rewritten twice."""

from __future__ import annotations

from collections.abc import Callable

from egraph_ir.expr import Call, Constant

from ....loop_ir import INDEX, LANES, Bin, For, LExpr, Load, LoopVar, Stmt, Store, add, idx, mul
from ...compute.definitions import Index
from ...group import Group
from ...kinds import ConvKernel
from ...kinds import Ref as BufferRef
from . import nchwc as conv_blocked
from . import winograd as conv_winograd
from .epilogue import micro_kernel


def _epilogue(
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
    pixel = add(pixel0, p)
    rows = [Bin(INDEX, "div", pixel, idx(shape[3])), Bin(INDEX, "rem", pixel, idx(shape[3]))]
    flat = add(add(start, mul(p, idx(LANES))), lane)
    index = Index(shape, multi=[b, block, *rows, lane], flat=flat)
    if sums is None:  # in place: the group reads the anchor from the output by default
        value = group.reader(group.fn.body)(index)
    else:
        value = group.result_at(index, sums(p, lane))
    store = Store("out", index.flat(), value)
    lanes = For("el", LANES, [store], unroll=True, vectorize=True)
    return [For("ep", pixels, [lanes], unroll=False)]


def blocked_depthwise(group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
    """Depthwise conv2d_nchwc: a loop over channel blocks, each sweeping its rows, each
    row followed by its epilogue."""
    g = conv_blocked.BlockedShape.of(anchor)
    source = group.buffers[anchor.args[0]].name
    weights = group.buffer_of(Constant(conv_blocked.depthwise_weights(anchor)))
    block = LoopVar(INDEX, "blk")

    def after_row(b: LExpr, y: LExpr) -> list[Stmt]:
        row = mul(add(mul(add(mul(b, idx(g.ob)), block), idx(g.oh)), y), idx(g.ow))
        return _epilogue(group, mul(row, idx(LANES)), g.ow, mul(y, idx(g.ow)), block, b)

    stmts = conv_blocked.depthwise_rows(anchor, block, source, weights, after_row)
    macs = conv_blocked.depthwise_macs(anchor)
    return micro_kernel(
        group, anchor, ops, stmts, ("blk", g.cb), macs, {}, [], None, "nchwc-depthwise"
    )


def blocked_pointwise(
    group: Group, anchor: Call, ops: list[str], lay: conv_blocked.PointwiseLayout
) -> ConvKernel:
    """Pointwise conv2d_nchwc: a loop over (panel of W output channels, part of the
    pixels), each register block of pixels followed by its epilogue from the thread's
    tile into the blocked output or the NCHW planes."""
    g = conv_blocked.BlockedShape.of(anchor)
    source = group.buffers[anchor.args[0]].name
    packed = group.buffer_of(Constant(lay.panels))
    work = LoopVar(INDEX, "work")
    panel = conv_blocked.panel_of(lay, work)
    pixels = g.oh * g.ow
    special = {"tile": BufferRef("scratch", 0)}
    scratches = [conv_blocked.pointwise_tile(anchor, lay)]

    def after_block(b: LExpr, first: LExpr) -> list[Stmt]:
        if not g.out_blocked:
            return _planes_from_tile(group, lay, panel, b, first)
        stmts: list[Stmt] = []
        for v in range(lay.xv):
            blk = add(mul(panel, idx(lay.xv)), idx(v))
            start = mul(add(mul(add(mul(b, idx(g.ob)), blk), idx(pixels)), first), idx(LANES))

            def sums(p: LExpr, lane: LExpr, v: int = v) -> LExpr:
                return Load(
                    "float32", "tile", conv_blocked.tile_at(lay, p, add(idx(v * LANES), lane))
                )

            stmts += _epilogue(group, start, lay.pr, first, blk, b, sums)
        return stmts

    stmts = conv_blocked.pointwise_panel(anchor, lay, work, source, packed, after_block)
    macs = conv_blocked.pointwise_macs(anchor)
    loop = ("work", lay.work)
    return micro_kernel(
        group, anchor, ops, stmts, loop, macs, special, scratches, None, "nchwc-pointwise"
    )


def blocked_winograd(
    group: Group, anchor: Call, ops: list[str], lay: conv_winograd.WinogradLayout
) -> ConvKernel:
    """conv2d_winograd: a loop over (rows of tiles, part of the panels); per batch item
    the input transform of its tiles, then per panel the n^2 products, the output
    transform and the epilogue of its output rows from the thread's scratch."""
    g = conv_winograd.WinogradShape.of(anchor)
    source = group.buffers[anchor.args[0]].name
    packed = group.buffer_of(Constant(lay.packed))
    item = conv_winograd.Item.of(lay, LoopVar(INDEX, "work"))
    per_part = lay.panels // lay.parts
    panel = add(mul(item.part, idx(per_part)), LoopVar(INDEX, "pp"))
    q, v = LoopVar(INDEX, "q"), LoopVar(INDEX, "ov")  # output row of the item, block
    blk = add(mul(panel, idx(lay.xv)), v)
    y = add(mul(item.ty, idx(g.tile)), q)
    start = mul(
        mul(add(mul(add(mul(item.b, idx(g.o // LANES)), blk), idx(g.oh)), y), idx(g.ow)), idx(LANES)
    )

    def sums(p: LExpr, lane: LExpr) -> LExpr:
        return conv_winograd.row_sum_at(anchor, lay, q, v, p, lane)

    rows = _epilogue(group, start, g.ow, mul(y, idx(g.ow)), blk, item.b, sums)
    rows_of_item = g.tile * lay.rows
    left = Bin(INDEX, "sub", idx(g.oh), mul(item.ty, idx(g.tile)))
    last = Bin(INDEX, "min", idx(rows_of_item), left)
    item_rows = For("q", rows_of_item, rows, unroll=False, stop=last)
    epilogue = For("ov", lay.xv, [item_rows], unroll=False)
    per_panel = [
        conv_winograd.products(anchor, lay, item, panel, packed),
        conv_winograd.output_transform(anchor, lay),
        epilogue,
    ]
    every_item = [
        conv_winograd.input_transform(anchor, lay, item, source),
        For("pp", per_part, per_panel, unroll=False),
    ]
    stmts: list[Stmt] = [For(item.b.name, g.n, every_item, unroll=False)]
    names = ("wino_v", "wino_m", "wino_y")
    special = {name: BufferRef("scratch", k) for k, name in enumerate(names)}
    loop = ("work", conv_winograd.work_items(anchor, lay))
    return micro_kernel(
        group, anchor, ops, stmts, loop, conv_winograd.macs(anchor), special,
        conv_winograd.scratch_shapes(anchor, lay), None, f"nchwc-winograd-{g.tile}x{g.tile}",
    )  # fmt: skip


def _planes_from_tile(
    group: Group, lay: conv_blocked.PointwiseLayout, panel: LExpr, b: LExpr, first: LExpr
) -> list[Stmt]:
    """The epilogue of a register block into NCHW planes: for each of the panel's W
    channels, its PR pixels (contiguous in the plane) from the tile. Lanes past the last
    channel (a padded panel) redo the last channel, writing the value it already has."""
    shape = group.out_type.shape  # (N, O, OH, OW)
    lane, r = LoopVar(INDEX, "el"), LoopVar(INDEX, "er")
    o = Bin(INDEX, "min", add(mul(panel, idx(lay.width)), lane), idx(shape[1] - 1))
    pixel = add(first, r)
    rows = [Bin(INDEX, "div", pixel, idx(shape[3])), Bin(INDEX, "rem", pixel, idx(shape[3]))]
    plane = add(mul(b, idx(shape[1])), o)
    index = Index(shape, multi=[b, o, *rows], flat=add(mul(plane, idx(shape[2] * shape[3])), pixel))
    at = conv_blocked.tile_at(lay, r, Bin(INDEX, "sub", o, mul(panel, idx(lay.width))))
    store = Store("out", index.flat(), group.result_at(index, Load("float32", "tile", at)))
    pixels = For("er", lay.pr, [store], unroll=True, vectorize=True)
    return [For("el", lay.width, [pixels], unroll=False)]
