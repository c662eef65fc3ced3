"""Identical fused groups share one compiled kernel."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from egraph_ir.expr import Call, Constant, Expr, Function
from egraph_ir.expr import children as expr_children
from egraph_ir.visitor import post_order

from .compute.gather import byte_table
from .driver import lower, primitive_ops
from .kinds import CompiledKernel
from .symbolic import SymbolicKernels


class KernelCache:
    """Identical fused groups (same ops, attributes, shapes and scalar constants) share one
    compiled kernel, as TVM's compile engine does: the second one reuses the first one's
    JIT functions under their names, bound to its own constants."""

    def __init__(
        self,
        host_fallback: bool = True,
        symbolic: SymbolicKernels | None = None,
        counterparts: Mapping[Function, Function] | None = None,
    ) -> None:
        """`symbolic` and `counterparts` (a specialisation's groups and their symbolic
        originals): a group takes the kernel lowered from its original where there is one
        (codegen/lower/symbolic.py)."""
        self.host_fallback = host_fallback
        self.first: dict[tuple[Any, ...], CompiledKernel] = {}
        self.hits = 0
        self.symbolic, self.counterparts = symbolic, counterparts or {}

    def lower(self, fn: Function, node_id: int) -> CompiledKernel:
        ops = primitive_ops(fn)
        name = f"k{node_id}_{'_'.join(ops[:3])}"
        original = self.counterparts.get(fn)
        kernel = None
        if self.symbolic is not None and original is not None:
            kernel = self.symbolic.kernel(original, name)
        if kernel is None:
            kernel = lower(fn, name, self.host_fallback)
        first = self.first.setdefault(group_key(fn), kernel)
        if first is not kernel:
            for mine, theirs in zip(kernel.jit_kernels(), first.jit_kernels(), strict=True):
                mine.name = theirs.name
            self.hits += 1
        return kernel


def group_key(fn: Function) -> tuple[Any, ...]:
    """What the generated code of a primitive function depends on: everything but the
    values of its non-scalar constants (those are bound as buffers), except small byte
    tables, which a table read bakes into the code (loop_ir.Lookup)."""
    number: dict[Expr, int] = {p: i for i, p in enumerate(fn.params)}
    key: list[Any] = [tuple(str(p.checked_type) for p in fn.params)]
    for node in post_order(fn.body):
        if node in number:
            continue
        number[node] = len(number)
        if isinstance(node, Constant):
            data = node.data
            baked = data.size == 1 or (data.ndim == 1 and byte_table(data))  # in the code
            value = data.tobytes() if baked else None
            key.append(("const", data.shape, str(data.dtype), value))
        elif isinstance(node, Call):
            attrs = tuple(sorted((k, repr(v)) for k, v in dict(node.attrs).items()))
            args = tuple(number[a] for a in node.args)
            key.append((getattr(node.op, "name", "?"), attrs, args, str(node.checked_type)))
        else:
            children = tuple(number.get(c, -1) for c in expr_children(node))
            key.append((type(node).__name__, children, getattr(node, "index", None)))
    return tuple(key)
