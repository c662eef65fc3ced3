"""qnn_conv2d with output channels in the vector lanes (kernel "conv/int8-channels"): the
panels of channels.py over the packed input words of int8.py, the int32 tile per panel,
then its epilogue."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from egraph_ir.expr import Call, Constant

from ....loop_ir import (
    INDEX,
    LExpr,
    LoopVar,
)
from ...compute.definitions import Index
from ...group import Group
from ...kinds import BufferRef, ConvKernel
from ...strategy import NativeKernel
from . import channels, int8
from .channels import ChannelLayout, tile_load, tile_shape
from .epilogue import channel_block, micro_kernel
from .int8 import ByteWords, offsets, pack_kernel, packed_input_shape
from .shape import ConvShape, sums_by_pairs


def int8_channel_conv(group: Group, anchor: Call, ops: list[str], lay: ChannelLayout) -> ConvKernel:
    """qnn_conv2d with output channels in the lanes (channels.py over the packed
    input words of int8.py): the int32 tile per panel, then its epilogue."""
    g = ConvShape.of(anchor)
    assert lay.wide is not None
    pad = pack_kernel(anchor, lay.wide, f"{group.name}_pack")
    packed = group.buffer_of(Constant(lay.panels))
    offset = group.buffer_of(Constant(offsets(anchor)))
    special = {"xpad": BufferRef("scratch", 0), "tile": BufferRef("scratch", 1)}
    tile = (tile_shape(anchor, lay), "int32")
    scratches = [packed_input_shape(anchor, lay.wide), tile]
    panel = LoopVar(INDEX, "panel")
    arithmetic = ByteWords(offsets=offset, pairs=sums_by_pairs(anchor))
    stmts = channels.panel_block(anchor, lay, panel, "xpad", packed, "tile", arithmetic)
    stmts += channel_block(group, panel, lay.width, flat_planes=True)
    macs, loop = channels.macs(anchor) // int8.WORD, ("panel", g.o // lay.width)
    return micro_kernel(
        group, anchor, ops, stmts, loop, macs, special, scratches, pad, Int8ChannelConv.NAME
    )


@dataclass(frozen=True)
class Int8ChannelConv(NativeKernel):
    """qnn_conv2d with output channels in the lanes over the packed input words."""

    NAME: ClassVar[str] = "conv/int8-channels"
    ANY_RESULT_DTYPE: ClassVar[bool] = True
    layout: ChannelLayout

    def anchor_load(self, group: Group, anchor: Call) -> Callable[[Index], LExpr]:
        return tile_load(group, anchor, self.layout)

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return int8_channel_conv(group, anchor, ops, self.layout)
