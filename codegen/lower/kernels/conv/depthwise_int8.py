"""A depthwise qnn_conv2d (kernel "conv/int8-depthwise"): the direct kernel's depthwise
path on the bytes. Each block copies its one input channel into the calling thread's slot
as float32 (bytes are exact floats; the padding holds the zero point) and sums the
products exactly in float32 (up to EXACT_TAPS taps), less the zero-point offset; the
epilogue reads the sums as int32."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant, Var

from ....loop_ir import (
    INDEX,
    LExpr,
    LoopVar,
    const,
)
from ...compute.definitions import Index
from ...group import Group
from ...kinds import BufferRef, ConvKernel
from ...strategy import NativeKernel
from .direct import direct_block, direct_macs, wide_rows_load
from .epilogue import INT8_MASKED_ROWS, channel_block, micro_kernel
from .prologue import phase_shape, private_copy
from .shape import Accumulation, ConvShape, Wide, int8_operands_fit


def byte_depthwise(group: Group, anchor: Call, ops: list[str], lay: Wide) -> ConvKernel:
    """A depthwise qnn_conv2d: each block copies its one input channel into the calling
    thread's slot as float32 (bytes are exact floats; padding holds the zero point), the
    float direct block sums the products exactly and subtracts the zero-point offset, and
    the epilogue reads the sums as int32 (depthwise_fits)."""
    g, x = ConvShape.of(anchor), anchor.args[0]
    assert isinstance(x, Var)
    weights, offsets = depthwise_weights(anchor)
    weight, offset = group.buffer_of(Constant(weights)), group.buffer_of(Constant(offsets))
    special = {"xpad": BufferRef("scratch", 0), "wide": BufferRef("scratch", 1)}
    plane, _ = phase_shape(anchor, lay)
    scratches = [(plane, "float32"), ((g.n, g.o, lay.q), "float32")]
    block, source = LoopVar(INDEX, "ob"), group.buffers[x].name
    fill = zero_point(anchor)
    stmts = private_copy(anchor, lay, block, source, "xpad", fill)
    arithmetic = Accumulation(offsets=offset)
    stmts += direct_block(anchor, lay, block, "xpad", weight, "wide", True, True, arithmetic)
    stmts += channel_block(group, block, lay.ob, masked_below=INT8_MASKED_ROWS)
    macs, loop = direct_macs(anchor, lay), ("ob", g.o // lay.ob)
    return micro_kernel(
        group, anchor, ops, stmts, loop, macs, special, scratches, None, ByteDepthwise.NAME
    )


# |x * w| <= 255 * 128 for 8-bit data: float32 sums of up to this many taps are exact
EXACT_TAPS = 2**24 // (255 * 128)


def depthwise_fits(call: Call) -> bool:
    """A depthwise qnn_conv2d (one input channel per output channel) the direct kernel's
    depthwise path computes exactly in float32: nothing to pack four channels at a time,
    and its sums of byte products stay integers below 2**24 for up to EXACT_TAPS taps."""
    if not int8_operands_fit(call):
        return False
    g = ConvShape.of(call)
    return int(call.attrs["groups"]) == g.c == g.o and g.kh * g.kw <= EXACT_TAPS


def depthwise_weights(call: Call) -> tuple[np.ndarray, np.ndarray]:
    """The weights as float32 and, per output channel, the input zero point times the
    sum of its weights (both exact integers in float32)."""
    w, x_zero = call.args[1], call.args[2]
    assert isinstance(w, Constant) and isinstance(x_zero, Constant)
    sums = w.data.astype(np.int64).reshape(w.data.shape[0], -1).sum(axis=1)
    offsets = int(x_zero.data.reshape(-1)[0]) * sums
    return w.data.astype(np.float32), offsets.astype(np.float32)


def zero_point(call: Call) -> LExpr:
    """The input zero point, the padding of a depthwise block's copy."""
    x_zero = call.args[2]
    assert isinstance(x_zero, Constant)
    return const(int(x_zero.data.reshape(-1)[0]), str(x_zero.data.dtype))


@dataclass(frozen=True)
class ByteDepthwise(NativeKernel):
    """A depthwise qnn_conv2d: the direct kernel's depthwise path on the bytes, summed
    exactly in float32 (depthwise_fits)."""

    NAME: ClassVar[str] = "conv/int8-depthwise"
    ANY_RESULT_DTYPE: ClassVar[bool] = True
    wide: Wide

    def anchor_load(self, group: Group, anchor: Call) -> Callable[[Index], LExpr]:
        return wide_rows_load(group, self.wide, stored="float32")

    def build(self, group: Group, anchor: Call, ops: list[str]) -> ConvKernel:
        return byte_depthwise(group, anchor, ops, self.wide)
