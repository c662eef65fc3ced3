"""The state of lowering one fused group (see codegen/lower/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from egraph_ir.dims import Dim
from egraph_ir.expr import Call, Constant, Expr, Function, Var
from egraph_ir.registry import Op, OpPattern
from egraph_ir.types import TensorType

from ..loop_ir import (
    INDEX,
    Buffer,
    Cast,
    For,
    LExpr,
    Load,
    LoopVar,
    Stmt,
    Store,
    const,
)
from .compute import columns, gather, qnn  # noqa: F401 (register their compute definitions)
from .compute.definitions import COMPUTE, Ctx, Index
from .kinds import Unsupported


class Group:
    """The lowering state of one primitive function: its buffers and constants, and the
    element expressions built so far, producers inlined into their consumers (memoised
    per element index). `anchor_load` reads the anchor's result where its strategy left
    it (default: the output buffer)."""

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
        self.anchor_load: Callable[[Index], LExpr] | None = None  # where the anchor's result is
        self.loops = 0
        self.in_registers = False  # the epilogue was applied inside the anchor's nest

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
        if e is self.anchor and self.anchor_load is not None:
            return self.anchor_load(index)
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
            readers = [self.reader(a) for a in e.args]
            values = [a.data if isinstance(a, Constant) else None for a in e.args]
            ctx = Ctx(e.attrs, in_types, e.checked_type, readers, index, values)  # type: ignore[arg-type]
            try:
                return _rounded(definition(ctx))
            except NotImplementedError as exc:
                raise Unsupported(str(exc)) from None
        raise Unsupported(f"cannot inline {type(e).__name__}")

    def result_at(self, index: Index, anchor_value: LExpr) -> LExpr:
        """The group's result at `index` where the anchor's element there is
        `anchor_value` (a kernel's scratch, tile or registers hold it, not `anchor_load`'s
        place)."""
        reads, self.anchor_load = self.anchor_load, lambda _: anchor_value
        try:
            return self.reader(self.fn.body)(index)
        finally:
            self.anchor_load = reads

    def var(self, prefix: str = "i") -> LoopVar:
        self.loops += 1
        return LoopVar(INDEX, f"{prefix}{self.loops}")

    def nest(
        self,
        shape: tuple[int, ...],
        inner: Callable[[list[LExpr]], list[Stmt]],
        unroll_outer: bool | None = None,
    ) -> list[Stmt]:
        """Loops over shape; the first axis longer than 1 is the thread-split one.
        `unroll_outer` False keeps LLVM from unrolling all but the innermost loop."""
        if not shape:
            return [For("i0", 1, inner([]), outer=True)]
        vars_ = [self.var() for _ in shape]
        outer_axis = next((k for k, d in enumerate(shape) if longer_than_one(d)), 0)
        body: list[Stmt] = inner(list(vars_))
        for k in reversed(range(len(shape))):
            unroll = None if k == len(shape) - 1 else unroll_outer
            body = [For(vars_[k].name, shape[k], body, outer=(k == outer_axis), unroll=unroll)]
        return body

    def store_through_epilogue(self, anchor: Call, index: Index, value: LExpr) -> Stmt:
        """Store the anchor's element, or the group's result computed from it in registers
        (the epilogue's ops pass the same index to the anchor; any other read is refused)."""
        if anchor is not self.fn.body:
            self.memo[(anchor, index)] = value
            self.in_registers = True
            value = self.reader(self.fn.body)(index)
        return Store("out", index.flat(), value)

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


def longer_than_one(d: int | Dim) -> bool:
    """Is this axis the one threads split? A symbolic size counts as long: the split is
    only a matter of speed, and at a size of 1 one thread does the whole of it."""
    return isinstance(d, Dim) or d > 1


def _rounded(value: LExpr) -> LExpr:
    """A float16 result rounded to float16 now: values are float32 in registers, and the
    rule is one rounding per op (Op.evaluate), not one per fused group."""
    if value.dtype != "float16":
        return value
    return Cast("float16", Cast("float32", value))


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
