"""conv2d_nchwc: convolutions on channel-blocked data (NCHW16c), the kernels behind the
layouts the e-graph chooses (rules/builtin/blocked.rules).

In NCHW16c a pixel's 16 channels of one block are one vector, so:

- a depthwise convolution is one fused multiply-add per tap for 16 channels: the weight
  vector of the tap times the input vector at the tapped pixel, whatever the stride (a
  stride-2 tap is a contiguous load too, where NCHW needs phase planes). Each channel
  block pads its plane into the calling thread's scratch slot, then sweeps the output rows
  in register blocks of PR pixels; the fused epilogue follows each row, in L1.
- a pointwise (1x1) convolution keeps PR pixels x XV output blocks of accumulators: per
  input channel it loads XV weight vectors and broadcasts PR input elements (as
  conv_channels.py), and stores each accumulator as one contiguous vector of the output,
  with no transposing read back into planes.

The weights stay OIHW in the IR and are packed at compile time: depthwise (blocks, taps,
16), pointwise panels (O / W, C, W) with W = 16 * XV.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_ir.expr import Call, Constant, Var
from egraph_ir.op.layout import channel_block
from egraph_ir.op.nn import norm_padding, norm_pair
from egraph_ir.types import TensorType

from .conv import LANES, zero
from .conv_channels import accumulator_budget, panels_of
from .loop_ir import (
    INDEX,
    THREAD_SLOT,
    Assign,
    Bin,
    Declare,
    For,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Splat,
    Stmt,
    Store,
    add,
    idx,
    mul,
)

VECTOR = f"float32x{LANES}"
MOST_PIXELS = 8  # a depthwise register block: 8 accumulators + up to 25 tap weights


@dataclass(frozen=True)
class BlockedShape:
    """Sizes of one conv2d_nchwc call: blocks of 16 channels in and out."""

    n: int
    cb: int  # input channel blocks
    h: int
    w: int
    ob: int  # output channel blocks
    oh: int
    ow: int
    kh: int
    kw: int
    top: int
    left: int
    bottom: int
    right: int
    sh: int
    sw: int
    dh: int
    dw: int

    @staticmethod
    def of(conv: Call) -> BlockedShape:
        x_t, w_t, out_t = conv.args[0].checked_type, conv.args[1].checked_type, conv.checked_type
        assert isinstance(x_t, TensorType) and isinstance(w_t, TensorType)
        assert isinstance(out_t, TensorType)
        n, cb, h, w, _ = x_t.shape
        _, ob, oh, ow, _ = out_t.shape
        top, left, bottom, right = norm_padding(conv.attrs["padding"])
        sh, sw = norm_pair(conv.attrs["strides"], "strides")
        dh, dw = norm_pair(conv.attrs["dilation"], "dilation")
        kh, kw = w_t.shape[2:]
        return BlockedShape(
            n, cb, h, w, ob, oh, ow, kh, kw, top, left, bottom, right, sh, sw, dh, dw
        )  # fmt: skip

    @property
    def padded(self) -> tuple[int, int]:
        return self.h + self.top + self.bottom, self.w + self.left + self.right


def _native(conv: Call) -> bool:
    x_t = conv.args[0].checked_type
    return (
        isinstance(conv.args[0], Var)
        and isinstance(conv.args[1], Constant)
        and isinstance(x_t, TensorType)
        and x_t.dtype == "float32"
        and channel_block(conv.attrs["layout"]) == LANES
    )


def depthwise_fits(conv: Call) -> bool:
    """One input and one output channel per group, float32, 16-channel blocks."""
    x_t, w_t = conv.args[0].checked_type, conv.args[1].checked_type
    assert isinstance(x_t, TensorType) and isinstance(w_t, TensorType)
    channels = x_t.shape[1] * x_t.shape[4]
    return _native(conv) and conv.attrs["groups"] == channels == w_t.shape[0]


def pointwise_fits(conv: Call) -> bool:
    """A 1x1 convolution of one group without stride or padding, float32, 16-channel blocks."""
    if not _native(conv) or conv.attrs["groups"] != 1:
        return False
    g = BlockedShape.of(conv)
    return (g.kh, g.kw, g.sh, g.sw) == (1, 1, 1, 1) and (g.top, g.left, g.bottom, g.right) == (
        0,
        0,
        0,
        0,
    )


# ---------------------------------------------------------------- depthwise
def depthwise_weights(conv: Call) -> np.ndarray:
    """(C, 1, KH, KW) weights as (C/16, KH*KW, 16): a tap's 16 channels are one vector."""
    w = conv.args[1]
    assert isinstance(w, Constant)
    data = np.asarray(w.data, dtype="float32")
    c, taps = data.shape[0], data.shape[2] * data.shape[3]
    return np.ascontiguousarray(data.reshape(c // LANES, LANES, taps).transpose(0, 2, 1))


def pixels_per_block(width: int, most: int) -> int:
    """Equal register blocks along a row: 28 pixels are 4 of 7, not 8+8+8+4."""
    return -(-width // -(-width // most))


def depthwise_scratch(conv: Call) -> tuple[tuple[int, ...], str]:
    """A padded plane of one channel block per thread slot."""
    g = BlockedShape.of(conv)
    hp, wp = g.padded
    return (g.cb, hp * wp * LANES), "float32"


def _pad_plane(g: BlockedShape, source: str, item: LExpr, slot: LExpr) -> list[Stmt]:
    """The block's plane of item `item` into the slot, zeros around it."""
    hp, wp = g.padded
    f, y, x = LoopVar(INDEX, "pf"), LoopVar(INDEX, "py"), LoopVar(INDEX, "px")
    zeros = For(
        "pf", hp * wp * LANES, [Store("pad", add(slot, f), zero("float32"))], vectorize=True
    )
    row_in = mul(add(mul(item, idx(g.h)), y), idx(g.w * LANES))
    row_out = add(slot, mul(add(mul(add(y, idx(g.top)), idx(wp)), idx(g.left)), idx(LANES)))
    copy = Store("pad", add(row_out, x), Load("float32", source, add(row_in, x)))
    return [zeros, For("py", g.h, [For("px", g.w * LANES, [copy], vectorize=True)])]


def depthwise_rows(conv: Call, block: LoopVar, source: str, weights: str, after_row) -> list[Stmt]:
    """Every output row of channel block `block` for every batch item into `out`;
    `after_row(b, y)` gives the statements that follow a finished row (its epilogue)."""
    g = BlockedShape.of(conv)
    hp, wp = g.padded
    taps = g.kh * g.kw
    b, y, xb = LoopVar(INDEX, "b"), LoopVar(INDEX, "y"), LoopVar(INDEX, "xb")
    item = add(mul(b, idx(g.cb)), block)
    slot = mul(THREAD_SLOT, idx(hp * wp * LANES))
    pr = pixels_per_block(g.ow, MOST_PIXELS)
    first: LExpr = mul(xb, idx(pr))
    if g.ow % pr:
        first = Bin(INDEX, "min", first, idx(g.ow - pr))
    w_at = mul(block, idx(taps * LANES))
    tap_weights = [Load(VECTOR, weights, add(w_at, idx(t * LANES))) for t in range(taps)]
    acc = [f"acc{p}" for p in range(pr)]
    body: list[Stmt] = [Declare(name, zero(VECTOR)) for name in acc]
    for i in range(g.kh):
        row = add(mul(y, idx(g.sh)), idx(i * g.dh))
        for j in range(g.kw):
            weight = tap_weights[i * g.kw + j]
            for p in range(pr):
                column = add(mul(add(first, idx(p)), idx(g.sw)), idx(j * g.dw))
                at = add(slot, mul(add(mul(row, idx(wp)), column), idx(LANES)))
                pixel = Load(VECTOR, "pad", at)
                update = Bin(VECTOR, "add", Ref(VECTOR, acc[p]), Bin(VECTOR, "mul", weight, pixel))
                body.append(Assign(acc[p], update))
    out_row = mul(add(mul(item, idx(g.oh)), y), idx(g.ow))
    for p in range(pr):
        at = mul(add(out_row, add(first, idx(p))), idx(LANES))
        body.append(Store("out", at, Ref(VECTOR, acc[p])))
    blocks = -(-g.ow // pr)
    sweep = For("xb", blocks, body, unroll=False)
    rows = For("y", g.oh, [sweep, *after_row(b, y)], unroll=False)
    return [For("b", g.n, [*_pad_plane(g, source, item, slot), rows])]


def depthwise_macs(conv: Call) -> int:
    g = BlockedShape.of(conv)
    return g.n * g.ob * LANES * g.oh * g.ow * g.kh * g.kw


# ---------------------------------------------------------------- pointwise
@dataclass(frozen=True)
class PointwiseLayout:
    """XV output blocks per panel, PR pixels per register block, the packed panels."""

    xv: int
    pr: int
    panels: np.ndarray  # (O / W, C, W)

    @property
    def width(self) -> int:
        return self.xv * LANES


def pointwise_layout(conv: Call) -> PointwiseLayout:
    g = BlockedShape.of(conv)
    xv = 2 if g.ob % 2 == 0 and accumulator_budget() >= 8 else 1
    pr = pixels_per_block(g.oh * g.ow, max(1, accumulator_budget() // xv))
    w = conv.args[1]
    assert isinstance(w, Constant)
    panels = panels_of(np.asarray(w.data, dtype="float32"), xv * LANES)
    return PointwiseLayout(xv, pr, panels)


def pointwise_panel(
    conv: Call, lay: PointwiseLayout, panel: LoopVar, source: str, packed: str, after_block
) -> list[Stmt]:
    """The panel's XV output blocks at every pixel of every item into `out`;
    `after_block(b, first)` follows each register block of PR pixels from `first`."""
    g = BlockedShape.of(conv)
    pixels = g.oh * g.ow
    b, pb, cb, lane = (LoopVar(INDEX, k) for k in ("b", "pb", "cb", "lane"))
    first: LExpr = mul(pb, idx(lay.pr))
    if pixels % lay.pr:
        first = Bin(INDEX, "min", first, idx(pixels - lay.pr))
    acc = [[f"acc{r}_{v}" for v in range(lay.xv)] for r in range(lay.pr)]
    body: list[Stmt] = [Declare(name, zero(VECTOR)) for names in acc for name in names]
    channel = add(mul(cb, idx(LANES)), lane)
    w_at = mul(add(mul(panel, idx(g.cb * LANES)), channel), idx(lay.width))
    loads = [Load(VECTOR, packed, add(w_at, idx(v * LANES))) for v in range(lay.xv)]
    plane = add(mul(add(mul(b, idx(g.cb)), cb), idx(pixels * LANES)), lane)
    updates: list[Stmt] = []
    for r in range(lay.pr):
        at = add(plane, mul(add(first, idx(r)), idx(LANES)))
        splat = Splat(VECTOR, Load("float32", source, at))
        for v in range(lay.xv):
            product = Bin(VECTOR, "mul", loads[v], splat)
            updates.append(Assign(acc[r][v], Bin(VECTOR, "add", Ref(VECTOR, acc[r][v]), product)))
    body.append(For("cb", g.cb, [For("lane", LANES, updates, unroll=False)], unroll=False))
    for v in range(lay.xv):
        out_plane = mul(add(mul(b, idx(g.ob)), add(mul(panel, idx(lay.xv)), idx(v))), idx(pixels))
        for r in range(lay.pr):
            at = mul(add(out_plane, add(first, idx(r))), idx(LANES))
            body.append(Store("out", at, Ref(VECTOR, acc[r][v])))
    body += after_block(b, first)
    return [For("b", g.n, [For("pb", -(-pixels // lay.pr), body, unroll=False)])]


def pointwise_macs(conv: Call) -> int:
    g = BlockedShape.of(conv)
    return g.n * g.ob * LANES * g.oh * g.ow * g.cb * LANES
