"""Loop nests over windows and rows: average pooling, max pooling a row of outputs at a time,
and softmax / log_softmax along an axis."""

from __future__ import annotations

import numpy as np

from egraph_ir.expr import Call, Expr
from egraph_ir.op.nn import norm_padding, norm_pair
from egraph_ir.types import TensorType

from ..loop_ir import (
    LANES,
    Assign,
    Bin,
    Declare,
    For,
    LExpr,
    Load,
    Ref,
    Select,
    Splat,
    Stmt,
    Store,
    Un,
    clamp,
    const,
    idx,
    within,
)
from .compute.definitions import Index, strides
from .group import Group
from .nests import lane_sum, lowest


def avg_pool_nest(group: Group, call: Call) -> list[Stmt]:
    """Window mean: explicit padding cells count when count_include_pad (the cells
    ceil_mode adds never do), as the reference."""
    src, in_t, out_t = _pool_types(call)
    _, _, h, w = in_t.shape
    (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right) = _pool_window(call)
    include_pad = bool(call.attrs["count_include_pad"])
    dtype = out_t.dtype
    read = group.reader(src)
    zero, one = const(0.0, dtype), const(1.0, dtype)

    def inner(vs: list[LExpr]) -> list[Stmt]:
        b, ch, y, x = vs
        i, j = group.var("i"), group.var("j")
        acc, cnt = f"acc{group.loops}", f"cnt{group.loops}"
        ih = y * sh + i * dh + (-top)
        iw = x * sw + j * dw + (-left)
        real = Bin("bool", "and", within(ih, 0, h), within(iw, 0, w))
        value = read(Index(in_t.shape, multi=[b, ch, clamp(ih, 0, h - 1), clamp(iw, 0, w - 1)]))
        counted = real
        if include_pad:
            counted = Bin("bool", "and", within(ih, -top, h + bottom), within(iw, -left, w + right))
        steps: list[Stmt] = [
            Assign(acc, Bin(dtype, "add", Ref(dtype, acc), Select(dtype, real, value, zero))),
            Assign(cnt, Bin(dtype, "add", Ref(dtype, cnt), Select(dtype, counted, one, zero))),
        ]
        init: list[Stmt] = [Declare(acc, zero), Declare(cnt, zero)]
        result = Bin(dtype, "div", Ref(dtype, acc), Ref(dtype, cnt))
        loops = [For(i.name, kh, [For(j.name, kw, steps)])]
        out = Index(out_t.shape, multi=vs).flat()
        return [*init, *loops, Store("out", out, result)]

    return group.nest(out_t.shape, inner)


def max_pool_rows(group: Group, call: Call) -> list[Stmt]:
    """Window max a row of outputs at a time, each output's window reduced in a register
    and stored once. The row splits into the columns whose windows lie inside the input
    (plain loads at a fixed stride, which LLVM vectorises along the row) and the few at
    its ends that reach into the padding (clamped loads, -inf or an integer type's least
    value outside); a window row outside the input is one test per row (it had updated
    the output row once per tap); numpy's max is a compare and select (llvm/emit.py).
    Twice as fast as a window per output (docs/performance.md)."""
    src, in_t, out_t = _pool_types(call)
    _, _, h, w = in_t.shape
    ow = out_t.shape[3]
    (kh, kw), (sh, sw), (dh, dw), (top, left, _, _) = _pool_window(call)
    dtype = out_t.dtype
    read = group.reader(src)
    least = const(lowest(dtype), dtype)
    first = min(ow, -(-left // sw))  # the first column whose window starts inside
    last = max(first, min(ow, (w - 1 - (kw - 1) * dw + left) // sw + 1))  # past the last

    def row(vs: list[LExpr]) -> list[Stmt]:
        b, ch, y = vs

        def columns(start: int, stop: int, inside: bool) -> list[Stmt]:
            if stop <= start:
                return []
            t = group.var("x")
            x = t + start
            best: LExpr = least  # one expression, no running accumulator (llvm/emit.py)
            for i in range(kh):
                ih = y * sh + (i * dh - top)
                for j in range(kw):
                    iw = x * sw + (j * dw - left)
                    ok = (
                        within(ih, 0, h)
                        if inside
                        else Bin("bool", "and", within(ih, 0, h), within(iw, 0, w))
                    )
                    col = iw if inside else clamp(iw, 0, w - 1)
                    cell = read(Index(in_t.shape, multi=[b, ch, clamp(ih, 0, h - 1), col]))
                    best = Bin(dtype, "max", best, Select(dtype, ok, cell, least))
            out = Index(out_t.shape, multi=[b, ch, y, x]).flat()
            return [For(t.name, stop - start, [Store("out", out, best)], vectorize=inside)]

        return [
            *columns(0, first, False),
            *columns(first, last, True),
            *columns(last, ow, False),
        ]

    return group.nest(out_t.shape[:-1], row)


def row_nest(group: Group, call: Call) -> list[Stmt]:
    """softmax / log_softmax along one axis: max, sum of exp, normalise. With an
    epilogue, the last pass recomputes each row element and applies the epilogue to it in
    registers (the epilogue may change the dtype; the row axis need not be the last)."""
    op = call.op.name  # type: ignore[union-attr]
    if op == "layer_norm":
        return norm_rows(group, call)
    src = call.args[0]
    t = src.checked_type
    assert isinstance(t, TensorType)
    axis = call.attrs["axis"] % t.ndim
    dtype = t.dtype
    outer_shape = tuple(d for k, d in enumerate(t.shape) if k != axis)
    read = group.reader(src)
    n = t.shape[axis]
    stride = strides(t.shape)[axis]
    fused = call is not group.fn.body

    def inner(vs: list[LExpr]) -> list[Stmt]:
        multi = list(vs)
        multi.insert(axis, idx(0))
        base = Index(t.shape, multi=multi).flat()

        def at(j: LExpr) -> LExpr:
            return base + j * stride

        m, s, r = f"m{group.loops}", f"s{group.loops}", f"r{group.loops}"
        j1, j2, j3 = group.var("j"), group.var("j"), group.var("j")
        x1 = read(Index(t.shape, flat=at(j1)))
        shifted = Bin(dtype, "sub", read(Index(t.shape, flat=at(j2))), Ref(dtype, m))
        e = Un(dtype, "exp", shifted)
        stmts: list[Stmt] = [
            Declare(m, const(-np.inf, dtype)),
            # maxnum skips NaN, but a NaN input still makes its row NaN through exp
            For(j1.name, n, [Assign(m, Bin(dtype, "maxnum", Ref(dtype, m), x1))]),
            Declare(s, const(0.0, dtype)),
        ]
        x3 = read(Index(t.shape, flat=at(j3)))
        if op == "softmax" and not fused:  # keep each exp in out, scale it in place
            t_ = f"t{group.loops}"
            total = Bin(dtype, "add", Ref(dtype, s), Ref(dtype, t_))
            stmts.append(
                For(
                    j2.name,
                    n,
                    [Declare(t_, e), Store("out", at(j2), Ref(dtype, t_)), Assign(s, total)],
                )
            )
            value: LExpr = Bin(dtype, "mul", Load(dtype, "out", at(j3)), Ref(dtype, r))
            stmts.append(Declare(r, Bin(dtype, "div", const(1.0, dtype), Ref(dtype, s))))
        else:
            stmts.append(For(j2.name, n, [Assign(s, Bin(dtype, "add", Ref(dtype, s), e))]))
            if op == "softmax":
                stmts.append(Declare(r, Bin(dtype, "div", const(1.0, dtype), Ref(dtype, s))))
                shifted3 = Bin(dtype, "sub", x3, Ref(dtype, m))
                value = Bin(dtype, "mul", Un(dtype, "exp", shifted3), Ref(dtype, r))
            else:
                stmts.append(
                    Declare(r, Bin(dtype, "add", Ref(dtype, m), Un(dtype, "log", Ref(dtype, s))))
                )
                value = Bin(dtype, "sub", x3, Ref(dtype, r))
        row = list(vs)
        row.insert(axis, j3)
        out = Index(t.shape, multi=row, flat=at(j3))
        stmts.append(For(j3.name, n, [group.store_through_epilogue(call, out, value)]))
        return stmts

    return group.nest(outer_shape, inner)


def _pool_types(call: Call) -> tuple[Expr, TensorType, TensorType]:
    src = call.args[0]
    in_t, out_t = src.checked_type, call.checked_type
    assert isinstance(in_t, TensorType) and isinstance(out_t, TensorType)
    return src, in_t, out_t


def _pool_window(
    call: Call,
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    """A 2-D pool's (kernel, strides, dilation, padding (top, left, bottom, right))."""
    a = call.attrs
    return (
        norm_pair(a["pool_size"], "pool_size"),
        norm_pair(a["strides"], "strides"),
        norm_pair(a["dilation"], "dilation"),
        norm_padding(a["padding"]),
    )


def row_shape(call: Call) -> tuple[int, ...]:
    t = call.args[0].checked_type
    assert isinstance(t, TensorType)
    axis = call.attrs["axis"] % t.ndim
    return tuple(d for k, d in enumerate(t.shape) if k != axis)


def norm_rows(group: Group, call: Call) -> list[Stmt]:
    """layer_norm over the last axis of float32 rows, one row at a time: the mean, then
    the mean squared deviation from it (two passes over a row that stays in cache, each
    a vector of partial sums), then each element normalised, scaled and shifted. One
    kernel where the decomposed form was four (two reductions, two elementwise passes)."""
    x, gamma, beta = call.args
    t = x.checked_type
    assert isinstance(t, TensorType)
    n, dtype, vec = t.shape[-1], t.dtype, f"{t.dtype}x{LANES}"
    source, attrs = group.buffers[x].name, call.attrs
    read, read_gamma, read_beta = group.reader(x), group.reader(gamma), group.reader(beta)

    def inner(vs: list[LExpr]) -> list[Stmt]:
        k = group.loops
        mean, rstd = f"mu{k}", f"rs{k}"
        base = Index(t.shape, multi=[*vs, idx(0)]).flat()
        sums, total = lane_sum(group, source, base, n, f"s{k}")

        def deviation(v: LExpr) -> LExpr:
            centre = Splat(vec, Ref(dtype, mean)) if v.dtype == vec else Ref(dtype, mean)
            d = Bin(v.dtype, "sub", v, centre)
            return Bin(v.dtype, "mul", d, d)

        squares, spread = lane_sum(group, source, base, n, f"q{k}", deviation)
        variance = Bin(dtype, "div", spread, const(float(n), dtype))
        root = Un(dtype, "sqrt", Bin(dtype, "add", variance, const(attrs["epsilon"], dtype)))
        j = group.var("j")
        at = Index(t.shape, multi=[*vs, j], flat=base + j)
        centred = Bin(dtype, "sub", read(at), Ref(dtype, mean))
        value: LExpr = Bin(dtype, "mul", centred, Ref(dtype, rstd))
        if attrs["scale"]:
            value = Bin(dtype, "mul", value, read_gamma(Index((n,), multi=[j])))
        if attrs["center"]:
            value = Bin(dtype, "add", value, read_beta(Index((n,), multi=[j])))
        return [
            *sums,
            Declare(mean, Bin(dtype, "div", total, const(float(n), dtype))),
            *squares,
            Declare(rstd, Bin(dtype, "div", const(1.0, dtype), root)),
            For(j.name, n, [group.store_through_epilogue(call, at, value)]),
        ]

    return group.nest(t.shape[:-1], inner)
