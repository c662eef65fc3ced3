"""What runs around the direct convolution: the padded (or phase-split) input copies it reads,
and the convolutions it does not take: im2col columns for a GEMM, and grouped direct loops
over the padded input."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from egraph_ir.expr import Call

from ....loop_ir import (
    INDEX,
    THREAD_SLOT,
    Assign,
    Bin,
    Buffer,
    Cast,
    Declare,
    For,
    Kernel,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Select,
    Stmt,
    Store,
    clamp,
    const,
    within,
)
from .shape import ConvShape, Wide, loop_var, zero


def uniform_phases(conv: Call, lay: Wide) -> bool:
    """Whether phase_kernel copies its phases with one loop (see _uniform)."""
    g = ConvShape.of(conv)
    return _uniform(g, lay.phases, lay.rows, lay.wp, (g.sh, g.sw))


def phase_kernel(conv: Call, lay: Wide, name: str) -> tuple[Kernel, tuple[tuple[int, ...], str]]:
    """The direct kernel's input: xph[n, c, phase (a, b), r, t] = x[n, c, r*sh + a - top,
    t*sw + b - left], zero outside, so every tap reads a contiguous row."""
    g = ConvShape.of(conv)
    return _split_copy(g, lay.phases, lay.rows, lay.wp, (g.sh, g.sw), name)


def phase_shape(conv: Call, lay: Wide) -> tuple[tuple[int, ...], str]:
    """The shape and dtype of phase_kernel's output (the scratch it fills)."""
    g = ConvShape.of(conv)
    return _split_shape(g, len(lay.phases), lay.rows, lay.wp), g.dtype


def _split_shape(g: ConvShape, phases: int, rows: int, width: int) -> tuple[int, ...]:
    return (g.n, g.c, phases, rows, width) if phases > 1 else (g.n, g.c, rows, width)


def pad_kernel(g: ConvShape, name: str) -> tuple[Kernel, tuple[tuple[int, ...], str]]:
    """xp[n, c, y, x] = x[n, c, y - top, x - left], zero outside (for grouped_kernel and
    the blocked pointwise kernel's windows over NCHW data: taps without bounds tests)."""
    hp, wp = g.padded
    return _split_copy(g, ((0, 0),), hp, wp, (1, 1), name)


def _split_copy(
    g: ConvShape,
    phases: Sequence[tuple[int, int]],
    rows: int,
    width: int,
    stride: tuple[int, int],
    name: str,
) -> tuple[Kernel, tuple[tuple[int, ...], str]]:
    """Per channel, one rows x width plane per stride phase (a, b) holding input rows
    a, a+sh, ... and columns b, b+sw, ... shifted by the padding, zero outside."""
    b, ch = loop_var("b"), loop_var("c")
    src_plane = (b * g.c + ch) * (g.h * g.w)
    dst_channel = (b * g.c + ch) * (len(phases) * rows * width)
    body = _plane_copy(g, phases, rows, width, stride, ("in0", src_plane), ("out", dst_channel))
    nest: list[Stmt] = [For("c", g.c, [For("b", g.n, body)], outer=True)]
    shape = _split_shape(g, len(phases), rows, width)
    buffers = [Buffer("in0", g.dtype, (g.n, g.c, g.h, g.w)), Buffer("out", g.dtype, shape)]
    work = float(g.n * g.c * len(phases) * rows * width)
    return Kernel(name, buffers, nest, g.c, work=work, unroll=False), (shape, g.dtype)


def private_copy(
    conv: Call, lay: Wide, channel: LExpr, source: str, dest: str, fill: LExpr | None = None
) -> list[Stmt]:
    """The direct kernel's input for one channel (every batch item) in the calling
    thread's slot of `dest` (THREAD_SLOT): a depthwise block copies the one channel it
    reads just before reading it, so the copy stays in cache instead of a whole padded
    input going out to memory and back (see `direct_block(private_source=True)`)."""
    g = ConvShape.of(conv)
    b = loop_var("pb")
    per_item = len(lay.phases) * lay.plane
    src_plane = (b * g.c + channel) * (g.h * g.w)
    dst = (THREAD_SLOT * g.n + b) * per_item
    stride = (g.sh, g.sw)
    ends = (source, src_plane), (dest, dst)
    body = _plane_copy(g, lay.phases, lay.rows, lay.wp, stride, *ends, fill)
    return [For("pb", g.n, body)]


def _plane_copy(
    g: ConvShape,
    phases: Sequence[tuple[int, int]],
    rows: int,
    width: int,
    stride: tuple[int, int],
    source: tuple[str, LExpr],
    dest: tuple[str, LExpr],
    fill: LExpr | None = None,
) -> list[Stmt]:
    """One channel's phase planes: (buffer, start) of its input plane and of its planes.
    Bounds are worked out here: border rows and columns are plain zero loops and the
    interior a (strided) copy without selects, which vectorises. The phases of one row
    phase share a row loop, and the columns every one of them reads are one loop storing
    to each: its loads are consecutive (an interleaved group LLVM loads as whole vectors
    and deinterleaves), where a loop per phase was a strided gather (a stride-2 depthwise
    layer spent two thirds of its time copying)."""
    fill = zero(g.dtype) if fill is None else fill
    if _uniform(g, phases, rows, width, stride):
        return _grid_copy(g, rows, width, stride, source, dest, fill)
    by_row: dict[int, list[int]] = {}
    for k, (pa, _) in enumerate(phases):
        by_row.setdefault(pa, []).append(k)
    body: list[Stmt] = []
    for ks in by_row.values():
        body += _row_phase_copy(g, phases, ks, (rows, width), stride, source, dest, fill)
    return body


def _row_phase_copy(
    g: ConvShape,
    phases: Sequence[tuple[int, int]],
    ks: list[int],
    size: tuple[int, int],
    stride: tuple[int, int],
    source: tuple[str, LExpr],
    dest: tuple[str, LExpr],
    fill: LExpr,
) -> list[Stmt]:
    """The planes `ks` (phases of one row phase): rows outside the input filled, then one
    row loop: per plane its zero columns and the columns only it reads, and one loop over
    the columns all of them read."""
    (rows, width), (sh, sw) = size, stride
    (src_buf, src_plane), (out, dst_channel) = source, dest
    r0, r1 = span(phases[ks[0]][0] - g.top, sh, g.h, rows)
    body: list[Stmt] = []
    for k in ks:
        plane = dst_channel + (k * rows * width)
        for first, count in ((0, r0), (r1, rows - r1)):
            if count > 0:
                r, t = loop_var(f"zr{k}_{first}"), loop_var(f"zt{k}_{first}")
                at = plane + ((r + first) * width + t)
                body.append(For(r.name, count, [For(t.name, width, [Store(out, at, fill)])]))
    if r1 <= r0:
        return body
    pa = phases[ks[0]][0]
    r = loop_var(f"r{pa}")
    src_row = src_plane + ((r + r0) * sh + (pa - g.top)) * g.w
    spans = {k: span(phases[k][1] - g.left, sw, g.w, width) for k in ks}
    lo, hi = max(t0 for t0, _ in spans.values()), min(t1 for _, t1 in spans.values())
    inner: list[Stmt] = []
    joint: list[Stmt] = []
    for k in ks:
        row = (k * rows * width) + (dst_channel + (r + r0) * width)
        t0, t1 = spans[k]
        copy = partial(_column_copy, g, sw, (src_buf, src_row, phases[k][1]), (out, row))
        for first, count in ((0, t0), (t1, width - t1)):
            if count > 0:
                t = loop_var(f"zc{k}_{first}")
                inner.append(For(t.name, count, [Store(out, row + (t + first), fill)]))
        alone = [(t0, t1)] if hi <= lo else [(t0, min(lo, t1)), (max(hi, t0), t1)]
        for a, b in alone:
            if b > a:
                t = loop_var(f"t{k}_{a}")
                inner.append(For(t.name, b - a, [copy(t + a)]))
        if hi > lo:
            joint.append(copy(loop_var(f"s{pa}") + lo))
    if joint:
        inner.append(For(f"s{pa}", hi - lo, joint))
    body.append(For(r.name, r1 - r0, inner))
    return body


def _column_copy(
    g: ConvShape,
    sw: int,
    source: tuple[str, LExpr, int],
    dest: tuple[str, LExpr],
    column: LExpr,
) -> Stmt:
    """dest row[column] = source row[column * sw + phase - left]."""
    (src_buf, src_row, phase), (out, row) = source, dest
    src = src_row + (column * sw + (phase - g.left))
    return Store(out, row + column, Load(g.dtype, src_buf, src))


def span(first: int, step: int, size: int, extent: int) -> tuple[int, int]:
    """The k in [0, extent) with 0 <= k*step + first < size."""
    lo = max(0, -(first // step))  # ceil(-first / step)
    hi = min(extent, max(lo, -(-(size - first) // step)))
    return lo, hi


def grid_spans(
    g: ConvShape, phases: Sequence[tuple[int, int]], rows: int, width: int
) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The (first, end) rows and columns every phase reads when `phases` is the whole
    stride grid, in order, of more than one phase and each reads the same ones (span);
    else None. Then one loop over the phases copies them all, instead of a copy per phase
    (256 for a ViT's 16x16 patches, a function LLVM takes up to a minute over)."""
    grid = [(a, b) for a in range(g.sh) for b in range(g.sw)]
    if len(grid) < 2 or list(phases) != grid:
        return None
    row_spans = {span(a - g.top, g.sh, g.h, rows) for a in range(g.sh)}
    column_spans = {span(b - g.left, g.sw, g.w, width) for b in range(g.sw)}
    if len(row_spans) != 1 or len(column_spans) != 1:
        return None
    return row_spans.pop(), column_spans.pop()


def _uniform(
    g: ConvShape,
    phases: Sequence[tuple[int, int]],
    rows: int,
    width: int,
    stride: tuple[int, int],
) -> bool:
    """Every phase of the stride grid reads whole input rows from its first row (no
    padding reaches it; rows past the input's, which the register blocks read, are
    zeros): _grid_copy copies them (grid_spans)."""
    spans = grid_spans(g, phases, rows, width)
    return spans is not None and spans[0][0] == 0 and spans[1] == (0, width)


def _grid_copy(
    g: ConvShape,
    rows: int,
    width: int,
    stride: tuple[int, int],
    source: tuple[str, LExpr],
    dest: tuple[str, LExpr],
    fill: LExpr,
) -> list[Stmt]:
    """_plane_copy for a uniform grid of phases (see _uniform): loops over the phases,
    the rows each reads copied, the rest filled."""
    sh, sw = stride
    (src_buf, src_plane), (out, dst_channel) = source, dest
    filled = span(-g.top, sh, g.h, rows)[1]
    pa, pb, r, t = (loop_var(k) for k in ("ga", "gb", "gr", "gt"))
    plane = dst_channel + (pa * sw + pb) * (rows * width)
    src_row = src_plane + (r * sh + pa + (-g.top)) * g.w
    src = src_row + (t * sw + pb + (-g.left))
    copy = Store(out, plane + (r * width + t), Load(g.dtype, src_buf, src))
    per_phase: list[Stmt] = [For(r.name, filled, [For(t.name, width, [copy])])]
    if filled < rows:
        z = loop_var("gz")
        zero_at = plane + ((filled * width) + z)
        per_phase.append(For(z.name, (rows - filled) * width, [Store(out, zero_at, fill)]))
    return [For(pa.name, sh, [For(pb.name, sw, per_phase)])]


def grouped_kernel(conv: Call, name: str) -> Kernel:
    """Any conv2d over the padded input (groups, depthwise, stride, dilation, any dtype):
    each output row accumulates, in place, one weight times a strided input row per
    (input channel, i, j); the row stays in L1 and the x loop vectorises."""
    g = ConvShape.of(conv)
    groups = int(conv.attrs["groups"])
    hp, wp = g.padded
    cg, og = g.c // groups, g.o // groups  # input and output channels per group
    dtype = g.dtype
    o, b, y, x, ch, i, j = (loop_var(k) for k in ("o", "b", "y", "x", "ch", "i", "j"))
    row = (b * g.o + o) * (g.oh * g.ow) + y * g.ow
    out_at = row + x
    group = o if og == 1 else o // og
    channel = group * cg + ch
    iy = y * g.sh + i * g.dh
    ix = x * g.sw + j * g.dw
    src = (b * g.c + channel) * (hp * wp) + (iy * wp + ix)
    w_at = (o * cg + ch) * (g.kh * g.kw) + (i * g.kw + j)
    if dtype == "float16":  # each output in a float32 register: the sum must not round
        wide = "float32"
        term = Bin(
            wide, "mul", Cast(wide, Load(dtype, "in1", w_at)), Cast(wide, Load(dtype, "in0", src))
        )
        sum_taps: list[Stmt] = [Assign("acc", Bin(wide, "add", Ref(wide, "acc"), term))]
        per_x = [
            Declare("acc", zero(wide)),
            For("ch", cg, [For("i", g.kh, [For("j", g.kw, sum_taps)])]),
            Store("out", out_at, Cast(dtype, Ref(wide, "acc"))),
        ]
        body: list[Stmt] = [For("x", g.ow, per_x)]
    else:  # each output row accumulated in place: the row stays in L1, x vectorises
        weight = "weight"
        update = Bin(dtype, "mul", Ref(dtype, weight), Load(dtype, "in0", src))
        accumulate = Store("out", out_at, Bin(dtype, "add", Load(dtype, "out", out_at), update))
        taps: list[Stmt] = [Declare(weight, Load(dtype, "in1", w_at)), For("x", g.ow, [accumulate])]
        body = [
            For("x0", g.ow, [Store("out", row + loop_var("x0"), zero(dtype))]),
            For("ch", cg, [For("i", g.kh, [For("j", g.kw, taps)])]),
        ]
    nest: list[Stmt] = [For("o", g.o, [For("b", g.n, [For("y", g.oh, body)])], outer=True)]
    buffers = [
        Buffer("in0", dtype, (g.n, g.c, hp, wp)),
        Buffer("in1", dtype, (g.o, cg, g.kh, g.kw)),
        Buffer("out", dtype, (g.n, g.o, g.oh, g.ow)),
    ]
    macs = g.n * g.o * g.oh * g.ow * cg * g.kh * g.kw
    return Kernel(name, buffers, nest, g.o, work=float(macs))


def im2col_kernel(conv: Call, name: str) -> tuple[Kernel, tuple[tuple[int, ...], str]]:
    """cols[n, (c, i, j), (oh, ow)] = padded x[n, c, oh*sh + i*dh, ow*sw + j*dw].

    The loop over ow is split, per kernel column j, into a left border, an interior where
    the input column is always in range (a contiguous, vectorisable copy) and a right border.
    """
    g = ConvShape.of(conv)
    n, c, h, w, kh, kw, oh, ow = g.n, g.c, g.h, g.w, g.kh, g.kw, g.oh, g.ow
    dtype = g.dtype
    shape = (n, c * kh * kw, oh * ow)
    ch, i, b, y = loop_var("c"), loop_var("i"), loop_var("b"), loop_var("y")
    ih = y * g.sh + i * g.dh + (-g.top)
    row_ok = within(ih, 0, h)
    plane = b * (c * h * w) + ch * (h * w)
    base = plane + clamp(ih, 0, h - 1) * w
    zero = const(0.0, dtype)
    segments: list[Stmt] = []
    for j in range(kw):
        row = ch * (kh * kw) + i * kw + j
        lo = min(ow, max(0, -(-(g.left - j * g.dw) // g.sw)))
        hi = max(lo, min(ow, (w - 1 + g.left - j * g.dw) // g.sw + 1))
        for start, stop, checked in ((0, lo, True), (lo, hi, False), (hi, ow, True)):
            if stop <= start:
                continue
            var = LoopVar(INDEX, f"x{j}_{start}")
            x = var + start
            iw = x * g.sw + (j * g.dw - g.left)
            ok = Bin("bool", "and", row_ok, within(iw, 0, w)) if checked else row_ok
            load = Load(dtype, "in0", base + (clamp(iw, 0, w - 1) if checked else iw))
            column = y * ow + x
            dst = (b * shape[1] + row) * shape[2] + column
            segments.append(
                For(var.name, stop - start, [Store("out", dst, Select(dtype, ok, load, zero))])
            )
    body: list[Stmt] = segments
    for key, extent in (("y", oh), ("b", n), ("i", kh)):
        body = [For(key, extent, body)]
    body = [For("c", c, body, outer=True)]
    buffers = [Buffer("in0", dtype, (n, c, h, w)), Buffer("out", dtype, shape)]
    kernel = Kernel(name, buffers, body, c, work=float(n * shape[1] * shape[2]))
    return kernel, (shape, dtype)
