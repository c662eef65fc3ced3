"""Direct 2-D convolution: a register-blocked micro-kernel in explicit vectors.

For stride-1, single-group float32 convolutions whose output rows are a multiple of 16
wide. The input is first padded into scratch (a small JIT kernel), then each step of the
main kernel keeps an OB x XV block of 16-lane accumulators in registers — OB output
channels times XV*16 output columns of one row — and sweeps the C*KH*KW reduction,
loading each input vector once for OB fused multiply-adds. Measured on the CNN's second
convolution (16->32 channels, 64x64): ~160 GFLOP/s on one core, against ~135 for
im2col + OpenBLAS, without the 2.4 MB column buffer. Threads split the output-channel blocks.
"""

from __future__ import annotations

from egraph_ir.expr import Call
from egraph_ir.types import TensorType

from .loop_ir import (
    INDEX,
    Assign,
    Bin,
    Buffer,
    Const,
    Declare,
    For,
    Kernel,
    Load,
    LoopVar,
    Ref,
    Select,
    Splat,
    Stmt,
    Store,
    add,
    clamp,
    const,
    idx,
    mul,
    within,
)

LANES = 16


def direct_fits(conv: Call) -> bool:
    x_t, out_t = conv.args[0].checked_type, conv.checked_type
    if not (isinstance(x_t, TensorType) and isinstance(out_t, TensorType)):
        return False
    return (
        x_t.dtype == "float32"
        and conv.attrs["groups"] == 1
        and tuple(conv.attrs["strides"]) == (1, 1)
        and out_t.shape[3] % LANES == 0
    )


def _blocks(out_channels: int, width: int) -> tuple[int, int]:
    """(OB, XV): output channels and 16-lane vectors per register block (<= 16 accumulators)."""
    ob = next(b for b in (8, 4, 2, 1) if out_channels % b == 0)
    vectors = width // LANES
    xv = next(v for v in (2, 1) if vectors % v == 0 and ob * v <= 16)
    return ob, xv


def _v(name: str) -> LoopVar:
    return LoopVar(INDEX, name)


def pad_kernel(conv: Call, name: str) -> tuple[Kernel, tuple[tuple[int, ...], str]]:
    """xp[n, c, y, x] = x[n, c, y - top, x - left], zero outside."""
    x_t = conv.args[0].checked_type
    assert isinstance(x_t, TensorType)
    n, c, h, w = x_t.shape
    top, left, bottom, right = conv.attrs["padding"]
    hp, wp = h + top + bottom, w + left + right
    b, ch, y, x = _v("b"), _v("c"), _v("y"), _v("x")
    iy, ix = add(y, idx(-top)), add(x, idx(-left))

    src = add(
        mul(add(mul(b, idx(c)), ch), idx(h * w)),
        add(mul(clamp(iy, 0, h - 1), idx(w)), clamp(ix, 0, w - 1)),
    )
    ok = Bin("bool", "and", within(iy, 0, h), within(ix, 0, w))
    value = Select("float32", ok, Load("float32", "in0", src), const(0.0, "float32"))
    dst = add(mul(add(mul(b, idx(c)), ch), idx(hp * wp)), add(mul(y, idx(wp)), x))
    body: list[Stmt] = [For("x", wp, [Store("out", dst, value)])]
    body = [For("y", hp, body)]
    body = [For("c", c, [For("b", n, body)], outer=True)]
    shape = (n, c, hp, wp)
    kernel = Kernel(
        name,
        [Buffer("in0", "float32", x_t.shape), Buffer("out", "float32", shape)],
        body,
        c,
        work=float(n * c * hp * wp),
    )
    return kernel, (shape, "float32")


def direct_kernel(conv: Call, name: str) -> Kernel:
    """out[n, o, y, x] = sum over c, i, j of w[o, c, i, j] * xp[n, c, y + i*dh, x + j*dw]."""
    x_t, w_t, out_t = (a.checked_type for a in (conv.args[0], conv.args[1], conv))
    assert isinstance(x_t, TensorType) and isinstance(w_t, TensorType)
    assert isinstance(out_t, TensorType)
    n, c, h, w = x_t.shape
    o, _, kh, kw = w_t.shape
    _, _, oh, ow = out_t.shape
    top, left, bottom, right = conv.attrs["padding"]
    dh, dw = conv.attrs["dilation"]
    hp, wp = h + top + bottom, w + left + right
    ob, xv = _blocks(o, ow)
    vec = f"float32x{LANES}"
    ob_, b, y, xb, ch, i, j = (_v(k) for k in ("ob", "b", "y", "xb", "ch", "i", "j"))
    x0 = mul(xb, idx(xv * LANES))
    row = add(mul(add(mul(b, idx(c)), ch), idx(hp * wp)), mul(add(y, mul(i, idx(dh))), idx(wp)))
    start = add(add(row, x0), mul(j, idx(dw)))
    loads = [Load(vec, "in0", add(start, idx(k * LANES))) for k in range(xv)]
    body: list[Stmt] = [
        Declare(f"acc{p}_{k}", Const(vec, 0.0)) for p in range(ob) for k in range(xv)
    ]
    updates: list[Stmt] = []
    for p in range(ob):
        channel = add(mul(ob_, idx(ob)), idx(p))
        weight = add(
            mul(channel, idx(c * kh * kw)), add(mul(ch, idx(kh * kw)), add(mul(i, idx(kw)), j))
        )
        splat = Splat(vec, Load("float32", "in1", weight))
        for k in range(xv):
            acc = f"acc{p}_{k}"
            updates.append(
                Assign(acc, Bin(vec, "add", Ref(vec, acc), Bin(vec, "mul", splat, loads[k])))
            )
    body.append(For("ch", c, [For("i", kh, [For("j", kw, updates)])]))
    for p in range(ob):
        channel = add(mul(ob_, idx(ob)), idx(p))
        base = add(mul(add(mul(b, idx(o)), channel), idx(oh * ow)), add(mul(y, idx(ow)), x0))
        for k in range(xv):
            body.append(Store("out", add(base, idx(k * LANES)), Ref(vec, f"acc{p}_{k}")))
    nest: list[Stmt] = [For("xb", ow // (xv * LANES), body)]
    nest = [For("y", oh, nest)]
    nest = [For("ob", o // ob, [For("b", n, nest)], outer=True)]
    buffers = [
        Buffer("in0", "float32", (n, c, hp, wp)),
        Buffer("in1", "float32", w_t.shape),
        Buffer("out", "float32", out_t.shape),
    ]
    macs = n * o * oh * ow * c * kh * kw
    return Kernel(name, buffers, nest, o // ob, work=float(macs // LANES))  # vector FMAs
