"""TODO docstring."""

from __future__ import annotations

from egraph_ir.expr import Call, Constant

from ....loop_ir import (
    INDEX,
    LoopVar,
)
from ...group import Group
from ...kinds import ConvKernel
from ...kinds import Ref as BufferRef
from . import channels as conv_channels
from . import int8 as conv_int8
from .epilogue import channel_block, micro_kernel
from .shape import ConvShape


def int8_channel_conv(
    group: Group, anchor: Call, ops: list[str], lay: conv_channels.ChannelLayout
) -> ConvKernel:
    """qnn_conv2d with output channels in the lanes (conv_channels.py over the packed
    input words of conv_int8.py): the int32 tile per panel, then its epilogue."""
    g = ConvShape.of(anchor)
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
