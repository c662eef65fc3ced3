"""Loop nests of the anchors that are plain loops: elementwise groups, reductions, small
products and arg-max, each with the epilogue applied where the result is stored."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_ir.dims import Dim
from egraph_ir.expr import Call, Constant, Expr, Var
from egraph_ir.registry import Op, OpPattern
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order

from ..loop_ir import (
    INDEX,
    LANES,
    Assign,
    Bin,
    Cast,
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
    const,
    dim_expr,
    idx,
)
from .compute.definitions import Index
from .group import Group, longer_than_one


def elementwise_nest(group: Group, root: Expr, rolled: bool = False) -> list[Stmt]:
    """One loop per output axis, except that trailing axes every tensor of the group reads
    whole (or not at all) are one loop: a 14x14 plane is a run of 196 to vectorise, not
    14 rows of 14 (docs/performance.md: measured changes). Channel-blocked data
    (NCHW16c) keeps its lanes as the innermost, vectorised loop, and the axes before them
    merge the same way. `rolled`: LLVM
    must not unroll the loops outside the innermost one (see the driver)."""
    shape = _shape(root)
    first = merged_from(group, root)
    if first is None and (lanes := lanes_merged_from(group, root)) is not None:
        return _lane_nest(group, root, lanes)
    loops = shape
    if first is not None:
        loops = (*shape[:first], int(np.prod(shape[first:], dtype=np.int64)))

    def inner(vs: list[LExpr]) -> list[Stmt]:
        index = Index(loops, multi=vs) if vs else Index(loops, flat=idx(0))
        flat = index.flat()
        multi = vs
        if first is not None and vs:
            multi = [*vs[:first], *_unflatten(vs[first], shape[first:])]
        index = Index(shape, multi=multi or None, flat=flat)
        return [Store("out", flat, group.reader(root)(index))]

    unroll = False if rolled else None
    spans = _padded_row_spans(root, loops)
    if spans is None:
        return group.nest(loops, inner, unroll_outer=unroll)

    def row(vs: list[LExpr]) -> list[Stmt]:
        parts: list[Stmt] = []
        for start, count in spans:
            v = group.var()
            parts.append(For(v.name, count, inner([*vs, v + start])))
        return parts

    return group.nest(loops[:-1], row, unroll_outer=unroll)


def _padded_row_spans(root: Expr, loops: tuple[Any, ...]) -> list[tuple[int, int]] | None:
    """A group whose result is a constant pad along its innermost loop's axis: the loop
    split into the padding before, the input's run and the padding after. In the run every
    read is at consecutive addresses (vector loads, once LLVM sees the clamps are no-ops);
    one loop over the whole row read it by gathers (EfficientNet-B0's int8 SiLUs: a third
    of the model's time)."""
    if not (isinstance(root, Call) and isinstance(root.op, Op) and root.op.name == "pad"):
        return None
    # the threads split the first axis longer than one: it must stay a loop of the nest
    if root.attrs["pad_mode"] != "constant" or not any(map(longer_than_one, loops[:-1])):
        return None
    (before, after), width = root.attrs["pad_width"][-1], loops[-1]
    if not isinstance(width, int) or not (before or after) or width - before - after <= 0:
        return None
    bounds = [(0, before), (before, width - before - after), (width - after, after)]
    return [(start, count) for start, count in bounds if count > 0]


def _shape(e: Expr) -> tuple[int, ...]:
    t = e.checked_type
    assert isinstance(t, TensorType)
    return t.shape


RESHAPES = ("reshape", "flatten", "squeeze", "expand_dims")


def before_reshapes(root: Expr) -> tuple[Expr, tuple[int, ...]]:
    """What an anchor-free group computes before its trailing reshapes, when that has
    more axes than the result: a reshape keeps the elements' order, so a nest over the
    finer shape stores each element at the same offset, with every index affine. Patches
    cut from an image ((1,3,14,16,14,16) transposed, flattened to (196, 768)) copy whole
    16-pixel rows instead of dividing each element's offset by 256 and 16. Returns the
    expression to compute and its shape."""
    inner = root
    while isinstance(inner, Call) and getattr(inner.op, "name", "") in RESHAPES:
        inner = inner.args[0]
    if not isinstance(inner, Call) or len(_shape(inner)) <= len(_shape(root)):
        return root, _shape(root)
    return inner, _shape(inner)


def _simple_leaves(group: Group, root: Expr) -> list[TensorType] | None:
    """The tensors an all-elementwise-or-broadcast group reads, or None."""
    nodes = list(post_order(root))
    calls = [n for n in nodes if isinstance(n, Call)]
    simple = all(
        isinstance(c.op, Op)
        and c.op.pattern <= OpPattern.BROADCAST
        and isinstance(c.checked_type, TensorType)
        for c in calls
    )
    leaves = [n.checked_type for n in nodes if isinstance(n, Var | Constant)]
    if not simple or not all(isinstance(t, TensorType) for t in leaves):
        return None
    return leaves  # type: ignore[return-value]


def merged_from(group: Group, root: Expr) -> int | None:
    """The first of the trailing axes elementwise_nest runs as one loop (None: none). The
    per-axis indices stay exact (a division and a remainder of the flat position), so
    this only decides speed: merge where no tensor needs them — every call elementwise or
    broadcast, every parameter and constant (right-aligned to the output) reading each of
    those axes whole or none of them."""
    shape = _shape(root)
    leaves = _simple_leaves(group, root)
    if len(shape) < 2 or leaves is None:
        return None
    return _merge_start(shape, leaves, len(shape))


def _merge_start(shape: tuple[int, ...], leaves: list[TensorType], end: int) -> int | None:
    """The first of the axes before `end` that merge into one loop (None: fewer than two)."""
    # the axis threads split (the first longer than 1) stays whole: the kernel's extent,
    # and any anchor nest before this one in the kernel, are counted in it
    outer = next((k for k, d in enumerate(shape) if longer_than_one(d)), 0)
    first = end - 1
    while first > outer + 1:
        axes = range(first - 1, end)
        if not all(_whole_or_absent(t.shape, shape, axes) for t in leaves):
            break
        first -= 1
    return first if first < end - 1 else None


BLOCK_LANES = (8, 16, 32, 64)  # a last axis of these extents is a blocked layout's lanes


def lanes_merged_from(group: Group, root: Expr) -> int | None:
    """For a last axis of blocked lanes every tensor reads whole or not at all: the first
    of the axes before it that run as one loop (the lanes stay a loop of their own)."""
    shape = _shape(root)
    leaves = _simple_leaves(group, root)
    if len(shape) < 3 or shape[-1] not in BLOCK_LANES or leaves is None:
        return None
    last = range(len(shape) - 1, len(shape))
    if not all(_whole_or_absent(t.shape, shape, last) for t in leaves):
        return None
    return _merge_start(shape, leaves, len(shape) - 1)


def _lane_nest(group: Group, root: Expr, first: int) -> list[Stmt]:
    """Loops over the axes before `first`, one over the merged axes, the lanes innermost
    and vectorised: a per-channel operand is one contiguous vector per step."""
    shape = _shape(root)
    loops = (*shape[:first], int(np.prod(shape[first:-1], dtype=np.int64)))

    def inner(vs: list[LExpr]) -> list[Stmt]:
        lane = group.var("l")
        multi = [*vs[:first], *_unflatten(vs[first], shape[first:-1]), lane]
        flat = Index((*loops, shape[-1]), multi=[*vs, lane]).flat()
        index = Index(shape, multi=multi, flat=flat)
        store = Store("out", flat, group.reader(root)(index))
        return [For(lane.name, shape[-1], [store], unroll=True, vectorize=True)]

    return group.nest(loops, inner)


def _whole_or_absent(dims: tuple[int, ...], shape: tuple[int, ...], axes: range) -> bool:
    """dims (right-aligned to shape) has every axis in `axes` whole, or every one 1."""
    aligned = (1,) * (len(shape) - len(dims)) + tuple(dims)
    return all(aligned[a] == shape[a] for a in axes) or all(aligned[a] == 1 for a in axes)


def _unflatten(f: LExpr, dims: tuple[int, ...]) -> list[LExpr]:
    """Per-axis indices of the flat position f within dims."""
    out: list[LExpr] = []
    stride = int(np.prod(dims, dtype=np.int64))
    for d in dims:
        stride //= d
        q = f if stride == 1 else f // stride
        out.append(q if len(out) == 0 else q % d)
    return out


def reduction_nest(group: Group, call: Call) -> list[Stmt]:
    op = call.op.name  # type: ignore[union-attr]
    src = call.args[0]
    in_t = src.checked_type
    assert isinstance(in_t, TensorType)
    axes: tuple[int, ...]
    if op == "global_avg_pool2d":  # a mean over H and W that keeps them
        op, axes, keep = "mean", (2, 3), True
    else:
        given = call.attrs["axis"]
        axes = tuple(range(in_t.ndim)) if given is None else tuple(a % in_t.ndim for a in given)
        keep = bool(call.attrs["keepdims"])
    kept = [k for k in range(in_t.ndim) if k not in axes]
    out_t = call.checked_type
    assert isinstance(out_t, TensorType)
    out_shape, dtype = out_t.shape, out_t.dtype
    if _over_blocked_lanes(group, call, op, axes, in_t):
        return _lane_reduction(group, call, op, axes, in_t)
    acc_name = f"acc{group.loops}"
    count = math.prod(in_t.shape[a] for a in axes)  # a Dim where a reduced axis is a size
    init, combine = _reduce_ops(op, dtype)
    read = group.reader(src)

    trailing = axes == tuple(range(in_t.ndim - len(axes), in_t.ndim))
    long = isinstance(count, int) and count >= MIN_SPLIT  # a size: the running sum
    split = op in ("sum", "mean") and dtype == "float32" and trailing and long
    source = group.buffers[src].name if split and isinstance(src, Var) else None

    def running(kept_vars: list[LExpr]) -> tuple[list[Stmt], LExpr]:
        """One accumulator over the reduced axes' loops: one loop where they are the
        trailing axes (a map's H and W: one run LLVM vectorises with several accumulators,
        where a loop per row summed each row's lanes apart)."""
        if trailing and len(axes) > 1:
            f = group.var("r")
            start = Index(in_t.shape, multi=[*kept_vars, *(idx(0) for _ in axes)]).flat()
            element = read(Index(in_t.shape, flat=start + f))
            update = Assign(acc_name, combine(Ref(dtype, acc_name), element))
            return [Declare(acc_name, init), For(f.name, count, [update])], Ref(dtype, acc_name)
        red_vars = {a: group.var("r") for a in axes}
        multi: list[LExpr] = []
        it = iter(kept_vars)
        for k in range(in_t.ndim):
            multi.append(red_vars[k] if k in red_vars else next(it))
        element = read(Index(in_t.shape, multi=multi))
        body: list[Stmt] = [Assign(acc_name, combine(Ref(dtype, acc_name), element))]
        for a in reversed(axes):
            body = [For(red_vars[a].name, in_t.shape[a], body)]
        return [Declare(acc_name, init), *body], Ref(dtype, acc_name)

    def inner(out_vars: list[LExpr]) -> list[Stmt]:
        kept_vars = [out_vars[k] for k in kept] if keep else out_vars
        if source is not None:  # one contiguous run per output, summed in lanes
            start = Index(in_t.shape, multi=[*kept_vars, *(idx(0) for _ in axes)]).flat()
            body, result = lane_sum(group, source, start, count, acc_name)
        else:
            body, result = running(kept_vars)
        if op == "mean":
            result = Bin(dtype, "div", result, _count(count, dtype))
        out_index = Index(out_shape, multi=out_vars) if out_vars else Index(out_shape, flat=idx(0))
        return [*body, group.store_through_epilogue(call, out_index, result)]

    return group.nest(out_shape, inner)


def _over_blocked_lanes(
    group: Group, call: Call, op: str, axes: tuple[int, ...], in_t: TensorType
) -> bool:
    """A float32 sum or mean over the axes just before a last axis of 16 lanes (global
    pooling of NCHW16c data), of a group input, with nothing fused after it, and an axis
    before them longer than 1 (the one the threads split, as for every reduction)."""
    return (
        op in ("sum", "mean")
        and any(longer_than_one(d) for d in in_t.shape[: in_t.ndim - 1 - len(axes)])
        and in_t.dtype == "float32"
        and isinstance(call.args[0], Var)
        and call is group.fn.body
        and in_t.ndim >= 2
        and in_t.shape[-1] == LANES
        and axes == tuple(range(in_t.ndim - 1 - len(axes), in_t.ndim - 1))
    )


def _lane_reduction(
    group: Group, call: Call, op: str, axes: tuple[int, ...], in_t: TensorType
) -> list[Stmt]:
    """One 16-lane accumulator per output vector: the reduced axes are consecutive runs of
    whole vectors (where the lanes had been summed one at a time, 16 floats apart: ten
    times faster, docs/performance.md)."""
    source = group.buffers[call.args[0]].name
    count = math.prod(in_t.shape[a] for a in axes)
    outer = in_t.shape[: axes[0]]
    vector = f"float32x{LANES}"
    acc, r = f"acc{group.loops}", group.var("r")

    def inner(vs: list[LExpr]) -> list[Stmt]:
        at = Index(outer, multi=vs).flat() if vs else idx(0)
        start = at * (count * LANES)
        load = Load(vector, source, start + r * LANES)
        total = For(r.name, count, [Assign(acc, Bin(vector, "add", Ref(vector, acc), load))])
        result: LExpr = Ref(vector, acc)
        if op == "mean":
            result = Bin(vector, "div", result, Splat(vector, _count(count, "float32")))
        return [Declare(acc, const(0.0, vector)), total, Store("out", at * LANES, result)]

    return group.nest(outer, inner)


def _count(count: int | Dim, dtype: str) -> LExpr:
    """A mean's divisor: the element count, read from the sizes where it names one."""
    if isinstance(count, Dim):
        return Cast(dtype, dim_expr(count), exact=True)
    return const(float(count), dtype)


MIN_SPLIT = 256  # elements per output from which the split sum pays (a 7x7 plane: no faster)


def lane_sum(
    group: Group,
    source: str,
    start: LExpr,
    count: int,
    name: str,
    term: Callable[[LExpr], LExpr] = lambda v: v,
) -> tuple[list[Stmt], LExpr]:
    """The float32 sum of source[start : start + count] (of `term` of each element: a
    squared deviation, say) as one vector of LANES partial sums over consecutive
    elements, its lanes added pairwise at the end, then the last count % LANES elements.
    (As plain loops LLVM vectorised across outputs with gathers.) The order differs from
    one running sum, as numpy's pairwise summation does too."""
    dtype, vec = "float32", f"float32x{LANES}"
    j, t = group.var("j"), group.var("t")
    body: list[Stmt] = [Declare(name, const(0.0, vec)), Declare(f"{name}_t", const(0.0, dtype))]
    chunk = term(Load(vec, source, start + j * LANES))
    body.append(For(j.name, count // LANES, [Assign(name, Bin(vec, "add", Ref(vec, name), chunk))]))
    if count % LANES:
        element = term(Load(dtype, source, start + ((count // LANES * LANES) + t)))
        tail = Assign(f"{name}_t", Bin(dtype, "add", Ref(dtype, f"{name}_t"), element))
        body.append(For(t.name, count % LANES, [tail]))
    total = Bin(dtype, "add", Un(dtype, "lanes_sum", Ref(vec, name)), Ref(dtype, f"{name}_t"))
    return body, total


def product_nest(group: Group, call: Call) -> list[Stmt]:
    """dense / matmul / batch_matmul as loops — any rank, broadcast batches, 1-D
    operands, transposes: small products (cheaper than a BLAS call) and integer ones."""
    a, b = call.args
    a_t, b_t, out_t = a.checked_type, b.checked_type, call.checked_type
    assert isinstance(a_t, TensorType) and isinstance(b_t, TensorType)
    assert isinstance(out_t, TensorType)
    name = call.op.name  # type: ignore[union-attr]
    ta = bool(call.attrs["transpose_a"]) if name == "batch_matmul" else False
    tb = bool(call.attrs["transpose_b"]) if name == "batch_matmul" else name == "dense"
    a_vec = name == "matmul" and a_t.ndim == 1
    b_vec = name == "matmul" and b_t.ndim == 1
    k_extent = a_t.shape[-2] if ta else a_t.shape[-1]
    read_a, read_b = group.reader(a), group.reader(b)
    dtype = out_t.dtype

    def batch(vs: list[LExpr], shape: tuple[int, ...]) -> list[LExpr]:
        """The batch indices of an operand, broadcast (right-aligned) from the output's."""
        offset = len(vs) - len(shape)
        return [idx(0) if d == 1 else vs[offset + n] for n, d in enumerate(shape)]

    def inner(vs: list[LExpr]) -> list[Stmt]:
        k = group.var("k")
        if name == "dense":  # x (..., K) . w (N, K)
            a_multi, b_multi = [*vs[:-1], k], [vs[-1], k]
        else:
            j = None if b_vec else vs[-1]
            rest = vs if b_vec else vs[:-1]
            i = None if a_vec else rest[-1]
            outer = rest if a_vec else rest[:-1]
            a_multi = (
                [k] if i is None else [*batch(outer, a_t.shape[:-2]), *([k, i] if ta else [i, k])]
            )
            b_multi = (
                [k] if j is None else [*batch(outer, b_t.shape[:-2]), *([j, k] if tb else [k, j])]
            )
        acc = f"acc{group.loops}"
        left = read_a(Index(a_t.shape, multi=a_multi))
        right = read_b(Index(b_t.shape, multi=b_multi))
        step = Assign(acc, Bin(dtype, "add", Ref(dtype, acc), Bin(dtype, "mul", left, right)))
        out = Index(out_t.shape, multi=vs).flat() if vs else idx(0)
        return [
            Declare(acc, const(0.0 if np.dtype(dtype).kind == "f" else 0, dtype)),
            For(k.name, k_extent, [step]),
            Store("out", out, Ref(dtype, acc)),
        ]

    return group.nest(out_t.shape, inner)


def argmax_nest(group: Group, call: Call) -> list[Stmt]:
    """Index of the first maximum (a NaN counts as the maximum, as in numpy)."""
    src = call.args[0]
    in_t, out_t = src.checked_type, call.checked_type
    assert isinstance(in_t, TensorType) and isinstance(out_t, TensorType)
    axis = call.attrs["axis"]
    keep = bool(call.attrs["keepdims"])
    read = group.reader(src)
    dtype = in_t.dtype
    flat_shape = (int(np.prod(in_t.shape, dtype=np.int64)),)

    def inner(vs: list[LExpr]) -> list[Stmt]:
        k = group.var("k")
        best, where = f"best{group.loops}", f"at{group.loops}"
        if axis is None:
            value = read(Index(in_t.shape, flat=k))
            extent = flat_shape[0]
        else:
            a = axis % in_t.ndim
            outer = [v for d, v in enumerate(vs) if not keep or d != a] if keep else list(vs)
            multi = [*outer[:a], k, *outer[a:]]
            value = read(Index(in_t.shape, multi=multi))
            extent = in_t.shape[a]
        current = Ref(dtype, best)
        nan_first = Bin(
            "bool", "and", Bin("bool", "ne", value, value), Bin("bool", "eq", current, current)
        )
        better = Bin("bool", "or", Bin("bool", "gt", value, current), nan_first)
        step: list[Stmt] = [
            Assign(where, Select(INDEX, better, k, Ref(INDEX, where))),
            Assign(best, Select(dtype, better, value, current)),
        ]
        out = Index(out_t.shape, multi=vs) if vs else Index(out_t.shape, flat=idx(0))
        return [
            Declare(best, const(lowest(dtype), dtype)),
            Declare(where, idx(0)),
            For(k.name, extent, step),
            group.store_through_epilogue(call, out, Ref(INDEX, where)),
        ]

    return group.nest(out_t.shape, inner)


def lowest(dtype: str) -> float | int:
    """The value every element of `dtype` is at least (argmax's starting best, max
    pooling's padding)."""
    if np.dtype(dtype).kind == "f":
        return -np.inf
    if np.dtype(dtype).kind == "b":
        return False
    return int(np.iinfo(dtype).min)


def _reduce_ops(op: str, dtype: str) -> tuple[LExpr, Callable[[LExpr, LExpr], LExpr]]:
    is_float = np.dtype(dtype).kind == "f"
    if op in ("sum", "mean"):
        return const(0.0 if is_float else 0, dtype), lambda a, b: Bin(dtype, "add", a, b)
    if op == "prod":
        return const(1.0 if is_float else 1, dtype), lambda a, b: Bin(dtype, "mul", a, b)
    if op == "max":
        low: Any = -np.inf if is_float else int(np.iinfo(dtype).min)
        return const(low, dtype), lambda a, b: Bin(dtype, "max", a, b)
    high: Any = np.inf if is_float else int(np.iinfo(dtype).max)
    return const(high, dtype), lambda a, b: Bin(dtype, "min", a, b)
