"""Identical fused groups share one compiled kernel."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from egraph_ir.expr import Constant, Function
from egraph_ir.visitor import post_order

from .driver import lower, primitive_ops
from .keys import group_key
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
        self.same: dict[tuple[Any, ...], CompiledKernel] = {}
        self.hits = 0
        self.symbolic, self.counterparts = symbolic, counterparts or {}

    def lower(self, fn: Function, node_id: int) -> CompiledKernel:
        ops = primitive_ops(fn)
        name = f"k{node_id}_{'_'.join(ops[:3])}"
        original = self.counterparts.get(fn)
        kernel = None
        if self.symbolic is not None and original is not None:
            kernel = self.symbolic.kernel(original, name, fn, self.host_fallback)
        elif self.symbolic is not None:  # no counterpart: lowered for these sizes only
            self.symbolic.lowered_per_size(name)
        key = group_key(fn)
        if kernel is None:
            # a copy of a group with the very same constants (an image of a depth-first
            # prefix, codegen/plan/depth_first.py) takes the kernel itself, not lowered again
            same = (key, tuple(id(c) for c in post_order(fn.body) if isinstance(c, Constant)))
            kernel = self.same.get(same)
            if kernel is not None:
                self.hits += 1
                return kernel
            kernel = self.same[same] = lower(fn, name, self.host_fallback)
        first = self.first.setdefault(key, kernel)
        if first is not kernel:
            for mine, theirs in zip(kernel.jit_kernels(), first.jit_kernels(), strict=True):
                mine.name = theirs.name
            self.hits += 1
        return kernel
