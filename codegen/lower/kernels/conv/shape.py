"""The vocabulary the convolution kernels share: a call's sizes (ConvShape, and
BlockedShape for NCHW16c data), the direct kernel's wide-row layout (Wide) that the int8
kernels reuse, what a block accumulates per tap (Accumulation), and the operand checks of
the byte kernels."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from egraph_ir.expr import Call, Constant, Var
from egraph_ir.op.layout import channel_block
from egraph_ir.op.nn import norm_padding, norm_pair
from egraph_ir.registry import Op
from egraph_ir.types import TensorType

from ....llvm.cpu import accumulator_budget, host_has
from ....llvm.mathlib import host_has_vnni
from ....loop_ir import (
    INDEX,
    LANES,
    Bin,
    Const,
    LExpr,
    Load,
    LoopVar,
    Splat,
    const,
    idx,
)


@dataclass(frozen=True)
class ConvShape:
    """The sizes, padding, strides and dilation of one NCHW/OIHW conv2d call."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    oh: int
    ow: int
    top: int
    left: int
    bottom: int
    right: int
    sh: int
    sw: int
    dh: int
    dw: int
    dtype: str

    @staticmethod
    def of(conv: Call) -> ConvShape:
        x_t, w_t, out_t = conv.args[0].checked_type, conv.args[1].checked_type, conv.checked_type
        assert isinstance(x_t, TensorType) and isinstance(w_t, TensorType)
        assert isinstance(out_t, TensorType)
        x, out = _plain(x_t.shape), _plain(out_t.shape)  # blocked sides: their NCHW sizes
        return conv_shape(x, w_t.shape, out, conv.attrs, x_t.dtype)

    @property
    def padded(self) -> tuple[int, int]:
        return self.h + self.top + self.bottom, self.w + self.left + self.right


def conv_shape(
    x: tuple[int, ...],
    w: tuple[int, ...],
    out: tuple[int, ...],
    attrs: Mapping[str, Any],
    dtype: str,
) -> ConvShape:
    """The sizes of a convolution from its NCHW data, OIHW weight and NCHW result shapes."""
    n, c, h, wd = x
    o, _, kh, kw = w
    oh, ow = out[2:]
    top, left, bottom, right = norm_padding(attrs["padding"])
    sh, sw = norm_pair(attrs["strides"], "strides")
    dh, dw = norm_pair(attrs["dilation"], "dilation")
    return ConvShape(
        n, c, h, wd, o, kh, kw, oh, ow, top, left, bottom, right, sh, sw, dh, dw, dtype
    )


def _blocks(channels_per_group: int, wide: int, pointwise: bool) -> tuple[int, int]:
    """(OB, XV): output channels and 16-lane vectors per register block (<= 16 accumulators
    with AVX-512, 6 with AVX2, where each takes two registers;
    depthwise gets 4 vectors of one channel). A 1x1 convolution's XV divides the row
    exactly when it can, so it needs neither padding nor cropping; other kernels take the
    widest block (their rows are padded anyway): with one vector per block, each FMA
    waits on its own weight broadcast (docs/performance.md: measured changes). A tap's XV
    input vectors are live beside the OB x XV sums: (OB + 1) x XV stays within the
    registers (AVX2: 2 x 2, not 2 x 3, which spilled: a 3x3/2 convolution 3.1 -> 1.9 ms)."""
    budget = min(16, accumulator_budget())  # 16 with AVX-512; 6 with AVX2 (no spills)
    ob = next(b for b in (8, 4, 2, 1) if channels_per_group % b == 0 and 2 * b <= budget)
    live = accumulator_budget() // (ob + 1) if ob > 1 else budget  # one channel: no limit
    most = max(1, min(budget // ob, live, 4, -(-wide // LANES)))
    exact = [v for v in range(most, 0, -1) if wide % (v * LANES) == 0]
    return ob, exact[0] if exact and pointwise else most


@dataclass(frozen=True)
class Wide:
    """The direct kernel's layout. The padded input is split by stride phase — plane (a, b)
    holds rows a, a+sh, ... and columns b, b+sw, ... — and output rows are as wide as a
    phase plane (`wp`): output q = y*wp + x then reads, for tap (i, j), plane
    (i*dh % sh, j*dw % sw) at q + (i*dh // sh)*wp + j*dw // sw, contiguous for every tap.
    The extra columns are computed and dropped by the epilogue that reads them. With
    stride 1 there is one plane: the padded input itself."""

    ob: int
    xv: int
    wp: int  # width of a phase plane and of an output row
    q: int  # oh * wp rounded up to whole register blocks
    rows: int  # rows of a phase plane, enough for every load of the last block
    phases: tuple[tuple[int, int], ...]  # the (row, column) phases some tap reads
    pad_free: bool  # the input itself can be read: stride 1, no padding, no load beyond it
    into_out: bool  # the wide rows are the NCHW output (q == oh*ow, wp == ow)

    @staticmethod
    def of(conv: Call) -> Wide:
        g = ConvShape.of(conv)
        groups = int(conv.attrs["groups"])
        hp, wpad = g.padded
        wp = -(-wpad // g.sw)
        ob, xv = _blocks(g.o // groups, g.oh * wp, (g.kh, g.kw) == (1, 1))
        block = xv * LANES
        q = -(-(g.oh * wp) // block) * block
        reach = q + ((g.kh - 1) * g.dh // g.sh) * wp + (g.kw - 1) * g.dw // g.sw
        rows = max(-(-hp // g.sh), -(-reach // wp))
        used = {(i * g.dh % g.sh, j * g.dw % g.sw) for i in range(g.kh) for j in range(g.kw)}
        # one plane when every tap reads the same phase (1x1 stride 2), else the full grid
        grid = [(a, b) for a in range(g.sh) for b in range(g.sw)]
        phases = sorted(used) if len(used) == 1 else grid
        no_pad = (g.top, g.left, g.bottom, g.right) == (0, 0, 0, 0)
        pad_free = no_pad and (g.sh, g.sw) == (1, 1) and rows == g.h
        return Wide(ob, xv, wp, q, rows, tuple(phases), pad_free, wp == g.ow and q == g.oh * g.ow)

    @property
    def plane(self) -> int:
        return self.rows * self.wp

    def tap(self, g: ConvShape, i: int, j: int) -> int:
        """Where tap (i, j) starts within one channel's phase planes (with several planes
        they form the full sh x sw grid)."""
        phase = 0
        if len(self.phases) > 1:
            phase = (i * g.dh % g.sh) * g.sw + j * g.dw % g.sw
        return phase * self.plane + (i * g.dh // g.sh) * self.wp + j * g.dw // g.sw

    def row_tap(self, g: ConvShape, i: LExpr, j: int) -> LExpr:
        """`tap` with the kernel row a loop variable (large kernels keep a row loop)."""
        rows: LExpr = i * g.dh
        phase_row: LExpr = idx(0)
        if g.sh > 1:
            phase_row = rows % g.sh
            rows = rows // g.sh
        phase: LExpr = idx(0)
        if len(self.phases) > 1:
            phase = phase_row * g.sw + (j * g.dw % g.sw)
        offset = phase * self.plane + rows * self.wp
        return offset + (j * g.dw // g.sw)


def loop_var(name: str) -> LoopVar:
    return LoopVar(INDEX, name)


def zero(dtype: str) -> Const:
    return const(0.0 if dtype.startswith("float") else 0, dtype)


@dataclass(frozen=True)
class Accumulation:
    """What a direct block accumulates per tap and input channel: a float32 FMA of the
    weight broadcast with an input vector. int8.py's subclass accumulates words of
    four u8 inputs times four s8 weights instead. With `offsets` (a buffer of one value
    per output channel) the block stores each sum minus its channel's offset: a
    quantised input's zero point times the sum of the channel's weights."""

    offsets: str = ""
    vector: str = f"float32x{LANES}"
    scalar: str = "float32"

    def channels(self, g: ConvShape, groups: int) -> int:
        """Input channels (or words of them) of one group the block sweeps."""
        return g.c // groups

    def update(self, acc: LExpr, inputs: LExpr, weight: LExpr) -> LExpr:
        return Bin(self.vector, "add", acc, Bin(self.vector, "mul", weight, inputs))

    def result(self, acc: LExpr, channel: LExpr) -> LExpr:
        """What the block stores for output channel `channel`."""
        if not self.offsets:
            return acc
        offset = Splat(self.vector, Load(self.scalar, self.offsets, channel))
        return Bin(self.vector, "sub", acc, offset)

    def lanes_result(self, acc: LExpr, first: LExpr) -> LExpr:
        """What a block stores for a vector of output channels from `first` (one per
        lane: channels.py)."""
        if not self.offsets:
            return acc
        return Bin(self.vector, "sub", acc, Load(self.vector, self.offsets, first))


FLOAT_SUMS = Accumulation()  # the float32 convolutions' arithmetic


def int8_operands_fit(call: Call) -> bool:
    """A qnn_conv2d over an 8-bit input with constant int8 weights whose zero points are
    0, a constant scalar input zero point and no negative padding."""
    if not (isinstance(call.op, Op) and call.op.name in ("qnn_conv2d", "qnn_conv2d_nchwc")):
        return False
    x, w, x_zero, w_zero = call.args
    x_t = x.checked_type
    consts = all(isinstance(a, Constant) for a in (w, x_zero, w_zero))
    if not (isinstance(x_t, TensorType) and consts):
        return False
    assert isinstance(w, Constant) and isinstance(x_zero, Constant) and isinstance(w_zero, Constant)
    g = ConvShape.of(call)
    return (
        x_t.dtype in ("uint8", "int8")
        and w.data.dtype == np.int8
        and x_zero.data.size == 1
        and not w_zero.data.any()  # 0, per tensor or per output channel
        and min(g.top, g.left, g.bottom, g.right) >= 0
    )


PAIR_LIMIT = 128  # |w0| + |w1| of a pair: 255 * 128 = 32640 stays within int16


def pairs_in_int16(weights: np.ndarray) -> bool:
    """Whether no pair of byte products (weights consecutive along the last axis, the pairs
    a word of four holds; an odd count padded with 0) can leave int16 for any input byte."""
    w = np.abs(weights.astype(np.int32))
    if w.shape[-1] % 2:
        w = np.concatenate([w, np.zeros((*w.shape[:-1], 1), np.int32)], axis=-1)
    pairs = w[..., 0::2] + w[..., 1::2]
    return pairs.size == 0 or int(pairs.max()) <= PAIR_LIMIT


def sums_by_pairs(call: Call) -> bool:
    """Whether an int8 kernel adds the call's byte products in int16 pairs (loop_ir.Dot4):
    where the call says so (its `pairs` attribute "saturating", ONNX Runtime's sums without
    VNNI), and on CPUs without VNNI, where pairs are the fast way (exact there:
    integer_sums_fit)."""
    return call.attrs.get("pairs") == "saturating" or not host_has_vnni()


def integer_sums_fit(call: Call, pair_order: np.ndarray) -> bool:
    """Whether this CPU's int8 kernels compute the call's sums as it declares them (its
    int8 weights in pair order: pairs consecutive along the last axis). With VNNI always
    (vpdpbusd exact, vpmaddubsw saturating); with AVX2 by vpmaddubsw, which saturates: for
    a saturating call, or where no pair can overflow (7-bit weights always). A saturating
    call of int8 data is not one: its pairs are of the signed bytes, the kernels' of the
    bytes shifted by 128."""
    saturating = call.attrs.get("pairs") == "saturating"
    data_t = call.args[0].checked_type
    if saturating and not (isinstance(data_t, TensorType) and data_t.dtype == "uint8"):
        return False
    if host_has_vnni():
        return True
    if not host_has("avx2"):
        return False
    return saturating or pairs_in_int16(pair_order)


VECTOR = f"float32x{LANES}"


@dataclass(frozen=True)
class BlockedShape(ConvShape):
    """ConvShape's sizes of one conv2d_nchwc call (the plain NCHW ones), and which
    sides are blocked (NCHW16c)."""

    data_blocked: bool
    out_blocked: bool

    @staticmethod
    def of(conv: Call) -> BlockedShape:
        x_t, w_t, out_t = conv.args[0].checked_type, conv.args[1].checked_type, conv.checked_type
        assert isinstance(x_t, TensorType) and isinstance(w_t, TensorType)
        assert isinstance(out_t, TensorType)
        plain = ConvShape.of(conv)
        sizes = dataclasses.asdict(plain)
        return BlockedShape(**sizes, data_blocked=x_t.ndim == 5, out_blocked=out_t.ndim == 5)

    @property
    def cb(self) -> int:
        return self.c // LANES

    @property
    def ob(self) -> int:
        return self.o // LANES


def _plain(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(N, C, H, W) of an NCHW or NCHW16c shape."""
    if len(shape) == 5:
        return shape[0], shape[1] * shape[4], shape[2], shape[3]
    n, c, h, w = shape
    return n, c, h, w


def native_blocks(conv: Call) -> bool:
    """float32, constant weights, each side NCHW or in blocks of this machine's vector."""
    x_t = conv.args[0].checked_type
    layouts = (conv.attrs["data_layout"], conv.attrs["out_layout"])
    return (
        isinstance(conv.args[0], Var)
        and isinstance(conv.args[1], Constant)
        and isinstance(x_t, TensorType)
        and x_t.dtype == "float32"
        and all(channel_block(layout) in (1, LANES) for layout in layouts)
    )


def pixels_per_block(width: int, most: int) -> int:
    """Equal register blocks along a row: 28 pixels are 4 of 7, not 8+8+8+4."""
    return -(-width // -(-width // most))


MIN_WORK = 8  # work items a blocked kernel is cut into, at least, so both threads have work
L2_SHARE = 256 * 1024  # bytes a kernel counts on keeping in a core's L2 (half of Zen 3's)
