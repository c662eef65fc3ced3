"""Lower one primitive function (a fused group) to a kernel (codegen/kernels.py).

Per group:

- `LoopKernel`: injective/elementwise groups become one loop nest over the output with
  every producer inlined; a reduction, softmax, pooling or small-product anchor becomes its
  own nest (injective producers inlined into its loads) followed by the elementwise
  epilogue, in place, in the same kernel;
- `GemmKernel`: large dense, matmul and batch_matmul anchors run through BLAS, then the
  fused epilogue (bias, activation, residual) runs as a JIT loop over the result, in place;
- `ConvKernel`: every conv2d runs natively — a register-blocked micro-kernel, a GEMM over
  JIT im2col columns (or over the input itself for 1x1), or direct loops for grouped and
  depthwise convolutions — with the epilogue after it;
- `HostKernel`: a group with an op that has no compute definition (or tuple results) runs
  through the op's numpy reference; `codegen.host_fallback=False` makes that an error.

`KernelCache` lowers every group of a graph and lets identical groups share compiled code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Expr, Function, Var
from egraph_ir.expr import children as expr_children
from egraph_ir.op._common import size_of
from egraph_ir.op.nn import norm_padding, norm_pair
from egraph_ir.registry import Op, OpPattern
from egraph_ir.types import NARROW_FLOATS, NARROW_INTS, TensorType, tensor_types
from egraph_ir.visitor import post_order

from . import blas, conv, gemm
from .compute import COMPUTE, Ctx, Index, strides
from .kernels import (
    CompiledKernel,
    ConvKernel,
    GemmKernel,
    HostKernel,
    JitGemmKernel,
    LoopKernel,
)
from .kernels import Ref as BufferRef
from .loop_ir import (
    INDEX,
    THREAD_SLOT,
    Assign,
    Bin,
    Buffer,
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
    Un,
    add,
    clamp,
    const,
    idx,
    mul,
    within,
)

REDUCTIONS = {"sum", "mean", "max", "min", "prod"}
NARROW = set(NARROW_FLOATS) | set(NARROW_INTS)  # numpy computes them through ml_dtypes
ROW_OPS = {"softmax", "log_softmax"}


class Unsupported(Exception):
    pass


def _op_calls(fn: Function) -> list[Call]:
    return [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]


def primitive_ops(fn: Function) -> list[str]:
    """The op names of a primitive function, producers first."""
    return [c.op.name for c in _op_calls(fn)]  # type: ignore[union-attr]


def lower(fn: Function, name: str, host_fallback: bool = True) -> CompiledKernel:
    """Lower a primitive function; fall back to the host, or raise CodegenError."""
    calls = _op_calls(fn)
    ops = [c.op.name for c in calls]  # type: ignore[union-attr]
    if _touches_an_empty_tensor(fn, calls):
        return HostKernel(name, ops, fn)  # no loop to generate; numpy's references agree
    try:
        narrow = _narrow_dtypes(fn, calls)
        if narrow:
            raise Unsupported(f"native kernels do not compute in {', '.join(narrow)}")
        return _Lowering(fn, name).run(calls, ops)
    except Unsupported as why:
        if not host_fallback:
            raise CodegenError(
                f"no compute definition for this group ({', '.join(ops)}): {why}; "
                "set codegen.host_fallback to run it with numpy"
            ) from None
        return HostKernel(name, ops, fn)


def _tensors(fn: Function, calls: list[Call]) -> list[TensorType]:
    """The tensors a group reads (parameters) or makes (its calls)."""
    types = [p.checked_type for p in fn.params] + [c.checked_type for c in calls]
    return [t for ty in types for t in tensor_types(ty)]


def _narrow_dtypes(fn: Function, calls: list[Call]) -> list[str]:
    """The storage-only dtypes (bfloat16, float8, int4, ...) a group reads or writes."""
    consts = [str(n.data.dtype) for n in post_order(fn.body) if isinstance(n, Constant)]
    found = {t.dtype for t in _tensors(fn, calls)} | set(consts)
    return sorted(found & NARROW)


def _touches_an_empty_tensor(fn: Function, calls: list[Call]) -> bool:
    """A group reading or writing a tensor with an axis of extent 0."""
    return any(t.size == 0 for t in _tensors(fn, calls))


class KernelCache:
    """Identical fused groups (same ops, attributes, shapes and scalar constants) share one
    compiled kernel, as TVM's compile engine does: the second one reuses the first one's
    JIT functions under their names, bound to its own constants."""

    def __init__(self, host_fallback: bool = True) -> None:
        self.host_fallback = host_fallback
        self.first: dict[tuple[Any, ...], CompiledKernel] = {}
        self.hits = 0

    def lower(self, fn: Function, node_id: int) -> CompiledKernel:
        ops = primitive_ops(fn)
        name = f"k{node_id}_{'_'.join(ops[:3])}"
        kernel = lower(fn, name, self.host_fallback)
        first = self.first.setdefault(group_key(fn), kernel)
        if first is not kernel:
            for mine, theirs in zip(kernel.jit_kernels(), first.jit_kernels(), strict=True):
                mine.name = theirs.name
            self.hits += 1
        return kernel


def group_key(fn: Function) -> tuple[Any, ...]:
    """What the generated code of a primitive function depends on: everything but the
    values of its non-scalar constants (those are bound as buffers)."""
    number: dict[Expr, int] = {p: i for i, p in enumerate(fn.params)}
    key: list[Any] = [tuple(str(p.checked_type) for p in fn.params)]
    for node in post_order(fn.body):
        if node in number:
            continue
        number[node] = len(number)
        if isinstance(node, Constant):
            data = node.data
            value = data.tobytes() if data.size == 1 else None
            key.append(("const", data.shape, str(data.dtype), value))
        elif isinstance(node, Call):
            attrs = tuple(sorted((k, repr(v)) for k, v in dict(node.attrs).items()))
            args = tuple(number[a] for a in node.args)
            key.append((getattr(node.op, "name", "?"), attrs, args, str(node.checked_type)))
        else:
            children = tuple(number.get(c, -1) for c in expr_children(node))
            key.append((type(node).__name__, children, getattr(node, "index", None)))
    return tuple(key)


class _Lowering:
    def __init__(self, fn: Function, name: str) -> None:
        self.fn, self.name = fn, name
        out = fn.body.checked_type
        if not isinstance(out, TensorType):
            raise Unsupported("tuple-valued result")
        self.out_type = out
        self.buffers: dict[Expr, Buffer] = {}
        self.constants: dict[str, np.ndarray] = {}
        for i, p in enumerate(fn.params):
            t = p.checked_type
            if not isinstance(t, TensorType):
                raise Unsupported("non-tensor parameter")
            self.buffers[p] = Buffer(f"in{i}", t.dtype, t.shape)
        self.out = Buffer("out", out.dtype, out.shape)
        self.memo: dict[tuple[Expr, Index], LExpr] = {}  # Index hashes by identity
        self.anchor: Call | None = None
        self.wide: conv.Wide | None = None  # the anchor's rows are in buffer "wide" (direct conv)
        self.packed: gemm.Packed | None = None  # a product on packed constant weights
        self.loops = 0
        self.in_registers = False  # the epilogue was applied inside the anchor's nest

    # ------------------------------------------------------------ readers
    def reader(self, e: Expr) -> Callable[[Index], LExpr]:
        def read(index: Index) -> LExpr:
            key = (e, index)
            if key not in self.memo:
                self._warm(e, index)
                self.memo[key] = self._element(e, index)
            return self.memo[key]

        return read

    def _warm(self, e: Expr, index: Index) -> None:
        """Build the elements of e's elementwise producers at the same index first, producers
        before consumers, so inlining a long chain needs no deep Python recursion."""
        if not isinstance(e, Call) or not _same_index(e, index):
            return
        order: list[Expr] = []
        seen: set[Expr] = {e}
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            stack.append((n, True))
            for a in n.args:  # type: ignore[attr-defined]
                fresh = a not in seen and (a, index) not in self.memo and a is not self.anchor
                if fresh and _same_index(a, index):
                    seen.add(a)
                    stack.append((a, False))
        for n in order[:-1]:  # the last one is e itself
            self.memo[(n, index)] = self._element(n, index)

    def _element(self, e: Expr, index: Index) -> LExpr:
        if e is self.anchor and self.wide is not None and not self.wide.into_out:
            # the block's rows in the calling thread's slot (conv.direct_block, private_dest)
            b, o, y, x = index.multi()
            n, ob = self.out_type.shape[0], self.wide.ob
            p = Bin(INDEX, "rem", o, idx(ob)) if ob > 1 else idx(0)
            row = add(mul(add(mul(THREAD_SLOT, idx(n)), b), idx(ob)), p)
            start = add(mul(row, idx(self.wide.q)), mul(y, idx(self.wide.wp)))
            return Load(self.out.dtype, "wide", add(start, x))
        if e is self.anchor:
            if self.in_registers:
                raise Unsupported("the epilogue reads the anchor at another position")
            return Load(self.out.dtype, "out", index.flat())
        if isinstance(e, Var):
            return Load(self.buffers[e].dtype, self.buffers[e].name, index.flat())
        if isinstance(e, Constant):
            data = e.data
            if data.size == 1:
                return const(data.reshape(-1)[0].item(), str(data.dtype))
            if e not in self.buffers:
                buf = Buffer(f"c{len(self.constants)}", str(data.dtype), data.shape)
                self.buffers[e] = buf
                self.constants[buf.name] = np.ascontiguousarray(data)
            return Load(str(data.dtype), self.buffers[e].name, index.flat())
        if isinstance(e, Call) and isinstance(e.op, Op):
            definition = COMPUTE.get(e.op.name)
            if definition is None:
                raise Unsupported(f"{e.op.name} has no compute definition")
            in_types = [a.checked_type for a in e.args]
            if not all(isinstance(t, TensorType) for t in in_types):
                raise Unsupported("non-tensor argument")
            ctx = Ctx(e.attrs, in_types, e.checked_type, [self.reader(a) for a in e.args], index)  # type: ignore[arg-type]
            try:
                return definition(ctx)
            except NotImplementedError as exc:
                raise Unsupported(str(exc)) from None
        raise Unsupported(f"cannot inline {type(e).__name__}")

    # ------------------------------------------------------------ nests
    def var(self, prefix: str = "i") -> LoopVar:
        self.loops += 1
        return LoopVar(INDEX, f"{prefix}{self.loops}")

    def nest(
        self, shape: tuple[int, ...], inner: Callable[[list[LExpr]], list[Stmt]]
    ) -> list[Stmt]:
        """Loops over shape; the first axis longer than 1 is the thread-split one."""
        if not shape:
            return [For("i0", 1, inner([]), outer=True)]
        vars_ = [self.var() for _ in shape]
        outer_axis = next((k for k, d in enumerate(shape) if d > 1), 0)
        body: list[Stmt] = inner(list(vars_))
        for k in reversed(range(len(shape))):
            body = [For(vars_[k].name, shape[k], body, outer=(k == outer_axis))]
        return body

    def elementwise_nest(self, root: Expr) -> list[Stmt]:
        shape = self.out_type.shape

        def inner(vs: list[LExpr]) -> list[Stmt]:
            index = Index(shape, multi=vs) if vs else Index(shape, flat=idx(0))
            flat = index.flat()
            index = Index(shape, multi=vs or None, flat=flat)
            return [Store("out", flat, self.reader(root)(index))]

        return self.nest(shape, inner)

    # ------------------------------------------------------------ anchors
    def reduction_nest(self, call: Call) -> list[Stmt]:
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
        acc_name = f"acc{self.loops}"
        count = int(np.prod([in_t.shape[a] for a in axes], dtype=np.int64))
        init, combine = _reduce_ops(op, dtype)
        read = self.reader(src)

        def inner(out_vars: list[LExpr]) -> list[Stmt]:
            kept_vars = [out_vars[k] for k in kept] if keep else out_vars
            red_vars = {a: self.var("r") for a in axes}
            multi: list[LExpr] = []
            it = iter(kept_vars)
            for k in range(in_t.ndim):
                multi.append(red_vars[k] if k in red_vars else next(it))
            element = read(Index(in_t.shape, multi=multi))
            body: list[Stmt] = [Assign(acc_name, combine(Ref(dtype, acc_name), element))]
            for a in reversed(axes):
                body = [For(red_vars[a].name, in_t.shape[a], body)]
            result: LExpr = Ref(dtype, acc_name)
            if op == "mean":
                result = Bin(dtype, "div", result, const(float(count), dtype))
            out_index = (
                Index(out_shape, multi=out_vars) if out_vars else Index(out_shape, flat=idx(0))
            )
            store = self.store_through_epilogue(call, out_index, result)
            return [Declare(acc_name, init), *body, store]

        return self.nest(out_shape, inner)

    def product_nest(self, call: Call) -> list[Stmt]:
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
        read_a, read_b = self.reader(a), self.reader(b)
        dtype = out_t.dtype

        def batch(vs: list[LExpr], shape: tuple[int, ...]) -> list[LExpr]:
            """The batch indices of an operand, broadcast (right-aligned) from the output's."""
            offset = len(vs) - len(shape)
            return [idx(0) if d == 1 else vs[offset + n] for n, d in enumerate(shape)]

        def inner(vs: list[LExpr]) -> list[Stmt]:
            k = self.var("k")
            if name == "dense":  # x (..., K) . w (N, K)
                a_multi, b_multi = [*vs[:-1], k], [vs[-1], k]
            else:
                j = None if b_vec else vs[-1]
                rest = vs if b_vec else vs[:-1]
                i = None if a_vec else rest[-1]
                outer = rest if a_vec else rest[:-1]
                a_multi = (
                    [k]
                    if i is None
                    else [*batch(outer, a_t.shape[:-2]), *([k, i] if ta else [i, k])]
                )
                b_multi = (
                    [k]
                    if j is None
                    else [*batch(outer, b_t.shape[:-2]), *([j, k] if tb else [k, j])]
                )
            acc = f"acc{self.loops}"
            left = read_a(Index(a_t.shape, multi=a_multi))
            right = read_b(Index(b_t.shape, multi=b_multi))
            step = Assign(acc, Bin(dtype, "add", Ref(dtype, acc), Bin(dtype, "mul", left, right)))
            out = Index(out_t.shape, multi=vs).flat() if vs else idx(0)
            return [
                Declare(acc, const(0.0 if np.dtype(dtype).kind == "f" else 0, dtype)),
                For(k.name, k_extent, [step]),
                Store("out", out, Ref(dtype, acc)),
            ]

        return self.nest(out_t.shape, inner)

    def argmax_nest(self, call: Call) -> list[Stmt]:
        """Index of the first maximum (a NaN counts as the maximum, as in numpy)."""
        src = call.args[0]
        in_t, out_t = src.checked_type, call.checked_type
        assert isinstance(in_t, TensorType) and isinstance(out_t, TensorType)
        axis = call.attrs["axis"]
        keep = bool(call.attrs["keepdims"])
        read = self.reader(src)
        dtype = in_t.dtype
        flat_shape = (int(np.prod(in_t.shape, dtype=np.int64)),)

        def inner(vs: list[LExpr]) -> list[Stmt]:
            k = self.var("k")
            best, where = f"best{self.loops}", f"at{self.loops}"
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
                Declare(best, const(_lowest(dtype), dtype)),
                Declare(where, idx(0)),
                For(k.name, extent, step),
                self.store_through_epilogue(call, out, Ref(INDEX, where)),
            ]

        return self.nest(out_t.shape, inner)

    def avg_pool_nest(self, call: Call) -> list[Stmt]:
        """Window mean: explicit padding cells count when count_include_pad (the cells
        ceil_mode adds never do), as the reference."""
        src, in_t, out_t = _pool_types(call)
        _, _, h, w = in_t.shape
        (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right) = _pool_window(call)
        include_pad = bool(call.attrs["count_include_pad"])
        dtype = out_t.dtype
        read = self.reader(src)
        zero, one = const(0.0, dtype), const(1.0, dtype)

        def inner(vs: list[LExpr]) -> list[Stmt]:
            b, ch, y, x = vs
            i, j = self.var("i"), self.var("j")
            acc, cnt = f"acc{self.loops}", f"cnt{self.loops}"
            ih = add(add(mul(y, idx(sh)), mul(i, idx(dh))), idx(-top))
            iw = add(add(mul(x, idx(sw)), mul(j, idx(dw))), idx(-left))
            real = Bin("bool", "and", within(ih, 0, h), within(iw, 0, w))
            value = read(Index(in_t.shape, multi=[b, ch, clamp(ih, 0, h - 1), clamp(iw, 0, w - 1)]))
            counted = real
            if include_pad:
                counted = Bin(
                    "bool", "and", within(ih, -top, h + bottom), within(iw, -left, w + right)
                )
            steps: list[Stmt] = [
                Assign(acc, Bin(dtype, "add", Ref(dtype, acc), Select(dtype, real, value, zero))),
                Assign(cnt, Bin(dtype, "add", Ref(dtype, cnt), Select(dtype, counted, one, zero))),
            ]
            init: list[Stmt] = [Declare(acc, zero), Declare(cnt, zero)]
            result = Bin(dtype, "div", Ref(dtype, acc), Ref(dtype, cnt))
            loops = [For(i.name, kh, [For(j.name, kw, steps)])]
            out = Index(out_t.shape, multi=vs).flat()
            return [*init, *loops, Store("out", out, result)]

        return self.nest(out_t.shape, inner)

    def max_pool_rows(self, call: Call) -> list[Stmt]:
        """Window max a row of outputs at a time: the row starts at -inf in the output and
        each window cell updates every output of the row, so the loop over the row is
        the innermost one and vectorises (one element's 3x3 window does not)."""
        src, in_t, out_t = _pool_types(call)
        _, _, h, w = in_t.shape
        ow = out_t.shape[3]
        (kh, kw), (sh, sw), (dh, dw), (top, left, _, _) = _pool_window(call)
        dtype = out_t.dtype
        read = self.reader(src)
        lowest = const(-np.inf, dtype)

        def row(vs: list[LExpr]) -> list[Stmt]:
            b, ch, y = vs
            x0, x, i, j = self.var("x"), self.var("x"), self.var("i"), self.var("j")

            def at(column: LExpr) -> LExpr:
                return Index(out_t.shape, multi=[b, ch, y, column]).flat()

            ih = add(add(mul(y, idx(sh)), mul(i, idx(dh))), idx(-top))
            iw = add(add(mul(x, idx(sw)), mul(j, idx(dw))), idx(-left))
            real = Bin("bool", "and", within(ih, 0, h), within(iw, 0, w))
            cell = read(Index(in_t.shape, multi=[b, ch, clamp(ih, 0, h - 1), clamp(iw, 0, w - 1)]))
            pick = Select(dtype, real, cell, lowest)
            update = Store("out", at(x), Bin(dtype, "max", Load(dtype, "out", at(x)), pick))
            return [
                For(x0.name, ow, [Store("out", at(x0), lowest)]),
                For(i.name, kh, [For(j.name, kw, [For(x.name, ow, [update])])]),
            ]

        return self.nest(out_t.shape[:-1], row)

    def row_nest(self, call: Call) -> list[Stmt]:
        """softmax / log_softmax along one axis: max, sum of exp, normalise. With an
        epilogue, the last pass recomputes each row element and applies the epilogue to it in
        registers (the epilogue may change the dtype; the row axis need not be the last)."""
        op = call.op.name  # type: ignore[union-attr]
        src = call.args[0]
        t = src.checked_type
        assert isinstance(t, TensorType)
        axis = call.attrs["axis"] % t.ndim
        dtype = t.dtype
        outer_shape = tuple(d for k, d in enumerate(t.shape) if k != axis)
        read = self.reader(src)
        n = t.shape[axis]
        stride = strides(t.shape)[axis]
        fused = call is not self.fn.body

        def inner(vs: list[LExpr]) -> list[Stmt]:
            multi = list(vs)
            multi.insert(axis, idx(0))
            base = Index(t.shape, multi=multi).flat()

            def at(j: LExpr) -> LExpr:
                return add(base, mul(j, idx(stride)))

            m, s, r = f"m{self.loops}", f"s{self.loops}", f"r{self.loops}"
            j1, j2, j3 = self.var("j"), self.var("j"), self.var("j")
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
                t_ = f"t{self.loops}"
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
                        Declare(
                            r, Bin(dtype, "add", Ref(dtype, m), Un(dtype, "log", Ref(dtype, s)))
                        )
                    )
                    value = Bin(dtype, "sub", x3, Ref(dtype, r))
            row = list(vs)
            row.insert(axis, j3)
            out = Index(t.shape, multi=row, flat=at(j3))
            stmts.append(For(j3.name, n, [self.store_through_epilogue(call, out, value)]))
            return stmts

        return self.nest(outer_shape, inner)

    def store_through_epilogue(self, anchor: Call, index: Index, value: LExpr) -> Stmt:
        """Store the anchor's element, or the group's result computed from it in registers
        (the epilogue's ops pass the same index to the anchor; any other read is refused)."""
        if anchor is not self.fn.body:
            self.memo[(anchor, index)] = value
            self.in_registers = True
            value = self.reader(self.fn.body)(index)
        return Store("out", index.flat(), value)

    # ------------------------------------------------------------ driver
    def run(self, calls: list[Call], ops: list[str]) -> CompiledKernel:
        anchors = [c for c in calls if _is_anchor(c)]
        if len(anchors) > 1:
            raise Unsupported("more than one anchor")
        anchor = anchors[0] if anchors else None
        body: list[Stmt] = []
        extent_shape = self.out_type.shape
        name = ""
        if anchor is not None:
            name = anchor.op.name  # type: ignore[union-attr]
            self.anchor = anchor
            anchor_t = anchor.checked_type
            assert isinstance(anchor_t, TensorType)
            if anchor is not self.fn.body and anchor_t.shape != self.out_type.shape:
                raise Unsupported("the epilogue changes the anchor's shape")
            if name in REDUCTIONS or name == "global_avg_pool2d":
                body += self.reduction_nest(anchor)
            elif name == "argmax":
                body += self.argmax_nest(anchor)
            elif gemm.packed_fits(anchor) and isinstance(anchor.args[0], Var):
                self.packed = gemm.pack(anchor)
            elif _small_product(anchor):
                body += self.product_nest(anchor)
            elif name == "max_pool2d":
                body += self.max_pool_rows(anchor)
                extent_shape = self.out_type.shape[:-1]
            elif name == "avg_pool2d":
                body += self.avg_pool_nest(anchor)
            elif name in ROW_OPS:
                body += self.row_nest(anchor)
                extent_shape = _row_shape(anchor)
            elif name in PRODUCTS or name == "conv2d":
                if any(not isinstance(x, Var | Constant) for x in anchor.args):
                    raise Unsupported(f"{name} takes materialised inputs")
                if name == "conv2d" and _direct(anchor):
                    self.wide = conv.Wide.of(anchor)  # the epilogue reads the wide rows
            else:
                raise Unsupported(f"{name} has no compute definition")
            if anchor_t.dtype != self.out_type.dtype and not self.in_registers:
                raise Unsupported(f"{name} writes its result in the output: no dtype change")
        if self.wide is not None:
            assert anchor is not None
            return self.direct_conv(anchor, ops)
        if self.packed is not None:
            assert anchor is not None
            return self.packed_gemm(anchor, ops)
        if anchor is not self.fn.body and not self.in_registers:
            body += self.elementwise_nest(self.fn.body)
        loops = None
        if body:
            buffers = self.kernel_buffers()
            work = float(size_of(self.out_type.shape)) * max(len(calls), 1)
            if anchor is not None:  # a reduction reads more than it writes
                work += _anchor_work(anchor)
            kernel = Kernel(self.name, buffers, body, _outer_extent(extent_shape), work)
            loops = LoopKernel(self.name, ops, kernel, dict(self.constants))
        if anchor is not None and name in PRODUCTS and not _small_product(anchor):
            a, b = (_operand(x, self.fn.params) for x in anchor.args)
            return GemmKernel(self.name, ops, blas.product_of(anchor), (a, b), loops)
        if anchor is not None and name == "conv2d":
            return self.conv_kernel(anchor, ops, loops)
        assert loops is not None
        return loops

    def direct_conv(self, anchor: Call, ops: list[str]) -> ConvKernel:
        """The direct micro-kernel and the epilogue in one loop over blocks of output
        channels: each block's rows are still in cache when its epilogue reads them."""
        lay, g = self.wide, conv.ConvShape.of(anchor)
        assert lay is not None
        x, w = anchor.args
        if not isinstance(x, Var):
            raise Unsupported("conv2d of a constant input")
        special: dict[str, BufferRef] = {}
        scratches: list[tuple[tuple[int, ...], str]] = []
        pad = None
        source = self.buffers[x].name
        groups = int(anchor.attrs["groups"])
        # depthwise: each block reads one input channel, padded by the block itself
        private = not lay.pad_free and g.c == groups and g.o // groups == lay.ob
        block = LoopVar(INDEX, "ob")
        stmts: list[Stmt] = []
        if not lay.pad_free:  # padded (and for strides, phase-split) input in scratch 0
            special["xpad"] = BufferRef("scratch", len(scratches))
            if private:
                stmts = conv.private_copy(anchor, lay, block, source, "xpad")
                scratches.append(conv.phase_shape(anchor, lay))
            else:
                pad, padded = conv.phase_kernel(anchor, lay, f"{self.name}_pad")
                scratches.append(padded)
            source = "xpad"
        dest = "out"
        if not lay.into_out:  # each block's rows in the calling thread's slot
            dest, special["wide"] = "wide", BufferRef("scratch", len(scratches))
            scratches.append(((g.n, g.o, lay.q), "float32"))
        weight = self.buffer_of(w)
        stmts += conv.direct_block(
            anchor, lay, block, source, weight, dest, private, not lay.into_out
        )
        if not (lay.into_out and anchor is self.fn.body):
            stmts += self.channel_block(block, lay.ob)
        named = zip(special, scratches, strict=True)
        buffers = self.kernel_buffers(
            [Buffer(name, "float32", shape) for name, (shape, _) in named]
        )
        work = conv.direct_macs(anchor, lay) / conv.LANES + size_of(self.out_type.shape)
        nest: list[Stmt] = [For("ob", g.o // lay.ob, stmts, outer=True)]
        kernel = Kernel(self.name, buffers, nest, g.o // lay.ob, work, unroll=False)
        fused = LoopKernel(self.name, ops, kernel, dict(self.constants), special)
        source_index = self.fn.params.index(x)
        weights = _operand(w, self.fn.params)
        return ConvKernel(
            self.name, ops, source_index, weights, pad, None, tuple(scratches), epilogue=fused
        )

    def packed_gemm(self, anchor: Call, ops: list[str]) -> LoopKernel:
        """The packed-weights micro-kernel and the epilogue, one column panel at a time."""
        p = self.packed
        assert p is not None
        panel = LoopVar(INDEX, "panel")
        a = self.buffers[anchor.args[0]].name
        stmts = gemm.panel_block(p, panel, a, self.buffer_of(Constant(p.panels)), "out")
        if anchor is not self.fn.body:
            stmts += self.panel_epilogue(panel, p)
        buffers = self.kernel_buffers()
        panels = p.n // p.width
        work = p.macs / gemm.LANES + size_of(self.out_type.shape)
        nest: list[Stmt] = [For("panel", panels, stmts, outer=True)]
        kernel = Kernel(self.name, buffers, nest, panels, work, unroll=False)
        return JitGemmKernel(self.name, ops, kernel, dict(self.constants))

    def panel_epilogue(self, panel: LExpr, p: gemm.Packed) -> list[Stmt]:
        """The epilogue over the columns of one panel, every row."""
        shape = self.out_type.shape
        m, j = LoopVar(INDEX, "em"), LoopVar(INDEX, "ej")
        column = add(mul(panel, idx(p.width)), j)
        lead = Index(shape[:-1], flat=m).multi() if len(shape) > 2 else [m]
        index = Index(shape, multi=[*lead, column], flat=add(mul(m, idx(p.n)), column))
        store = Store("out", index.flat(), self.reader(self.fn.body)(index))
        return [For("em", p.m, [For("ej", p.width, [store])])]

    def kernel_buffers(self, scratch: Sequence[Buffer] = ()) -> list[Buffer]:
        """A kernel's buffers in calling order: group inputs, constants, scratch, out."""
        constants = [b for e, b in self.buffers.items() if isinstance(e, Constant)]
        return [*(self.buffers[p] for p in self.fn.params), *constants, *scratch, self.out]

    def buffer_of(self, e: Expr) -> str:
        """The kernel buffer holding a group parameter or a (non-scalar) constant."""
        if isinstance(e, Constant) and e not in self.buffers:
            buf = Buffer(f"c{len(self.constants)}", str(e.data.dtype), e.data.shape)
            self.buffers[e] = buf
            self.constants[buf.name] = np.ascontiguousarray(e.data)
        return self.buffers[e].name

    def channel_block(self, block: LExpr, ob: int) -> list[Stmt]:
        """The epilogue (or a plain copy) for output channels block*ob .. block*ob + ob - 1."""
        shape = self.out_type.shape
        n, _, oh, ow = shape
        p, b, y, x = (LoopVar(INDEX, k) for k in ("ep", "eb", "ey", "ex"))
        index = Index(shape, multi=[b, add(mul(block, idx(ob)), p), y, x])
        store = Store("out", index.flat(), self.reader(self.fn.body)(index))
        return [For("ep", ob, [For("eb", n, [For("ey", oh, [For("ex", ow, [store])])])])]

    def conv_kernel(self, anchor: Call, ops: list[str], epilogue: LoopKernel | None) -> ConvKernel:
        """The convolutions the direct micro-kernel does not take: a 1x1 as a GEMM on the
        input, float64 as a GEMM over JIT im2col columns, the rest (grouped float64 or
        float16, negative padding) as direct loops over the padded input."""
        if not isinstance(anchor.args[0], Var):
            raise Unsupported("conv2d of a constant input")
        source = self.fn.params.index(anchor.args[0])
        weights = _operand(anchor.args[1], self.fn.params)
        kernel = partial(ConvKernel, self.name, ops, source, weights, epilogue=epilogue)
        if conv.pointwise(anchor):
            return kernel(None, None, gemm=conv.pointwise_product(anchor))
        if conv.columns_fit(anchor):
            columns, scratch = conv.im2col_kernel(anchor, f"{self.name}_im2col")
            return kernel(columns, None, (scratch,), gemm=conv.columns_product(anchor))
        pad, scratch = conv.pad_kernel(anchor, f"{self.name}_pad")
        return kernel(pad, conv.grouped_kernel(anchor, f"{self.name}_conv"), (scratch,))


PRODUCTS = ("dense", "matmul", "batch_matmul")


def _direct(anchor: Call) -> bool:
    """conv2d through the direct micro-kernel with its epilogue (codegen/conv.py), 1x1
    convolutions included: where their rows do not split into whole register blocks (7x7,
    14x14) the wide rows still beat a GEMM on the input, whose columns are too few for
    BLAS (MobileNetV2's 1x1 convolutions at 7x7: 163 against 260 us; the model 1.4x
    faster)."""
    return conv.direct_fits(anchor)


SMALL_PRODUCT = 1 << 16  # multiply-adds below which loops beat a BLAS call


def _small_product(call: Call) -> bool:
    """Products that run as loops: under SMALL_PRODUCT multiply-adds, or not float (BLAS
    has no integer GEMM)."""
    if not isinstance(call.op, Op) or call.op.name not in PRODUCTS:
        return False
    a_t, out_t = call.args[0].checked_type, call.checked_type
    if not (isinstance(a_t, TensorType) and isinstance(out_t, TensorType)):
        return False
    transposed = call.op.name == "batch_matmul" and call.attrs["transpose_a"]
    k = a_t.shape[-2] if transposed else a_t.shape[-1]
    return size_of(out_t.shape) * k <= SMALL_PRODUCT or a_t.dtype not in blas.BLAS_DTYPES


def _lowest(dtype: str) -> float | int:
    """The value every element of `dtype` is at least (argmax's starting best)."""
    if np.dtype(dtype).kind == "f":
        return -np.inf
    if np.dtype(dtype).kind == "b":
        return False
    return int(np.iinfo(dtype).min)


def _anchor_work(anchor: Call) -> float:
    """Element operations of a loop anchor: its input elements (reductions, pooling,
    softmax), or multiply-adds for a product."""
    out_t = anchor.checked_type
    assert isinstance(out_t, TensorType)
    if _small_product(anchor):
        a_t = anchor.args[0].checked_type
        assert isinstance(a_t, TensorType)
        return float(size_of(out_t.shape) * a_t.shape[-1])
    inputs = [a.checked_type for a in anchor.args]
    return float(sum(size_of(t.shape) for t in inputs if isinstance(t, TensorType)))


def _is_anchor(c: Call) -> bool:
    op = c.op
    assert isinstance(op, Op)
    return (
        op.pattern in (OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE) or op.name in ROW_OPS
    )


def _same_index(n: Expr, index: Index) -> bool:
    """An elementwise or broadcast call of index's shape: its arguments of that shape are
    read at the very same index (see compute.broadcast_index)."""
    t = n.checked_type
    return (
        isinstance(n, Call)
        and isinstance(n.op, Op)
        and n.op.pattern <= OpPattern.BROADCAST
        and isinstance(t, TensorType)
        and t.shape == index.shape
    )


def _row_shape(call: Call) -> tuple[int, ...]:
    t = call.args[0].checked_type
    assert isinstance(t, TensorType)
    axis = call.attrs["axis"] % t.ndim
    return tuple(d for k, d in enumerate(t.shape) if k != axis)


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


def _outer_extent(shape: tuple[int, ...]) -> int:
    return next((d for d in shape if d > 1), 1)


def _operand(x: Expr, params: tuple[Var, ...]) -> int | np.ndarray:
    """A library argument: the index of a group parameter, or a constant array."""
    if isinstance(x, Constant):
        return np.ascontiguousarray(x.data)
    assert isinstance(x, Var)
    return params.index(x)


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


__all__ = ["KernelCache", "group_key", "lower"]
