"""Kernels with run-time extents: a fused group of a symbolic program (its tensors
`Tensor[(1, 4, past, 32)]`) lowered once, its loops bound by the size variables' values
read when it runs (loop_ir.Size), and reused by every specialisation of the program.

A specialisation (codegen/symbolic.py) fuses nothing: it is the symbolic program's fused
module with the sizes put in, so its groups pair one to one with the symbolic ones. For
each pair the symbolic group is lowered first; a group whose lowering needs a decision no
size settles (a tile that fits some sizes only, a comparison of a size with a number) or
a strategy other than a loop nest, a packed float product or a BLAS product with a
loop-nest epilogue falls back to the static group, lowered for these sizes as before
(convolutions and int8 products so far). A group whose types hold no size is lowered
once for every specialisation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from egraph_ir.dims import Dim, evaluate, holds_dims, size_var
from egraph_ir.expr import Call, Function
from egraph_ir.module import IRModule
from egraph_ir.specialize import specialize, static_type
from egraph_ir.types import TensorType, Type
from egraph_ir.visitor import post_order

from ..llvm.emit import emit_module
from ..loop_ir import Buffer
from ..loop_text import kernel_text
from ..runtime.blas import product_of
from .driver import lower
from .keys import group_key
from .kinds import CompiledKernel, GemmKernel, JitGemmKernel, LoopKernel, RepeatedKernel
from .per_item import leading_size
from .select import PRODUCTS

log = logging.getLogger(__name__)
Template = LoopKernel | GemmKernel | RepeatedKernel


class NotForEverySize(Exception):
    """A build for every size met a group whose kernel serves one set of sizes only."""


def fused_groups(mod: IRModule) -> list[Function]:
    """The primitive functions main calls, in post order (as a specialisation pairs them)."""
    return [
        n.op
        for n in post_order(mod["main"].body)
        if isinstance(n, Call) and isinstance(n.op, Function)
    ]


def _symbolic(fn: Function) -> bool:
    """Does the group depend on sizes (its tensors' shapes, or sizes in attributes)?"""
    types = [p.checked_type for p in fn.params] + [fn.body.checked_type]
    if any(isinstance(t, TensorType) and not t.is_static for t in types):
        return True
    calls = (n for n in post_order(fn.body) if isinstance(n, Call))
    return any(holds_dims(v) for c in calls for v in c.attrs.values())


def _types(fn: Function, sizes: Mapping[str, int]) -> list[Type | None]:
    return [static_type(t.checked_type, sizes) for t in (*fn.params, fn.body)]


@dataclass
class SymbolicKernels:
    """The kernels lowered from a symbolic program's fused groups, kept across its
    specialisations; `begin(sizes)` starts the specialisation that `sizes` gives."""

    size_names: tuple[str, ...]
    fused: IRModule  # the symbolic program, optimised and fused
    sizes: dict[str, int] = field(default_factory=dict)  # in size_names order
    taken: int = 0  # groups of the current specialisation given a shared kernel
    # building for every size: stop at the first group that depends on the sizes but is
    # lowered for these sizes only (a fallback, a BLAS call's shape)
    every_size_only: bool = False
    templates: dict[tuple[object, str], Template | None] = field(default_factory=dict)
    # the kernels of groups whose types hold no size, by group and name
    fixed: dict[tuple[Function, str], CompiledKernel] = field(default_factory=dict)
    groups: list[Function] = field(init=False)  # fused's groups, in fused_groups order
    depends: dict[Function, bool] = field(init=False)  # does a group's code need the sizes

    def __post_init__(self) -> None:
        self.groups = fused_groups(self.fused)
        self.depends = {g: _symbolic(g) for g in self.groups}

    def begin(self, sizes: Mapping[str, int]) -> IRModule:
        """Start the specialisation at `sizes`: the fused program with them put in."""
        self.sizes = {name: sizes[name] for name in self.size_names}
        self.taken = 0
        return specialize(self.fused, self.sizes)

    def pairs(self, fused: IRModule) -> dict[Function, Function]:
        """Each static group of `fused` (a specialisation) and its symbolic counterpart,
        where the counterpart's types at these sizes are the group's (at some sizes an op
        changes rank, squeeze of an axis that is 1: that group is lowered per size)."""
        static = fused_groups(fused)
        if len(static) != len(self.groups):
            return {}
        return {
            s: g
            for s, g in zip(static, self.groups, strict=True)
            if not self.depends[g] or _types(g, self.sizes) == _types(s, self.sizes)
        }

    def kernel(
        self, group: Function, name: str, static: Function, host_fallback: bool
    ) -> CompiledKernel | None:
        """The symbolic group's kernel bound to the current sizes (`static`: the group at
        them), or None (lower the static group instead)."""
        if not self.depends[group]:
            if (group, name) not in self.fixed:
                self.fixed[(group, name)] = lower(group, name, host_fallback)
            return self.fixed[(group, name)]
        key = (group_key(group), name)
        if key not in self.templates:
            self.templates[key] = self._template(group, name)
        template = self.templates[key]
        if template is None:
            self.lowered_per_size(name)
            return None
        self.taken += 1
        if isinstance(template, RepeatedKernel):  # static code, its item count read
            return template
        if isinstance(template, GemmKernel):
            epilogue = _bound(template.epilogue, self.sizes) if template.epilogue else None
            if template.product is not None:  # its glue reads the sizes
                return replace(template, epilogue=epilogue)
            self.lowered_per_size(name)  # the BLAS call's shape is these sizes'
            return replace(template, product=product_of(_product_call(static)), epilogue=epilogue)
        return _bound(template, self.sizes)

    def lowered_per_size(self, name: str) -> None:
        """A group is lowered for these sizes only: when building for every size, that
        build stops here (before emitting anything)."""
        if self.every_size_only:
            raise NotForEverySize(f"group {name} is lowered for one set of sizes only")

    def _template(self, group: Function, name: str) -> Template | None:
        """The group lowered with its sizes symbolic and emitted once on trial; else for
        one item of its leading size where it computes items apart; else None."""
        return self._symbolic_template(group, name) or per_item_kernel(group, name)

    def _symbolic_template(self, group: Function, name: str) -> LoopKernel | GemmKernel | None:
        try:
            kernel = lower(group, name, host_fallback=False)
            if not isinstance(kernel, LoopKernel | GemmKernel) or not _taken(kernel):
                return None
            loops = kernel.epilogue if isinstance(kernel, GemmKernel) else kernel
            if loops is not None:
                loops.kernel.size_names = self.size_names
                emit_module([loops.kernel])
        except Exception as exc:  # any decision a size does not settle: per size instead
            log.debug("group %s is lowered per size: %s: %s", name, type(exc).__name__, exc)
            return None
        return kernel


def per_item_kernel(group: Function, name: str) -> RepeatedKernel | None:
    """The group lowered for one item of its leading size (a plain size variable), run
    once per item (codegen/lower/per_item.py), or None."""
    lead = leading_size(group)
    if lead is None or len(lead.names) != 1 or lead != size_var(next(iter(lead.names))):
        return None
    try:
        one = specialize(IRModule({"main": group}), {next(iter(lead.names)): 1})["main"]
        inner = lower(one, name, host_fallback=False)
    except Exception as exc:  # not typed or lowered at one item: per size instead
        log.debug("group %s is not run per item: %s: %s", name, type(exc).__name__, exc)
        return None
    if inner.native_calls() is None:
        return None
    strides = {("input", k): _item_bytes(p.checked_type) for k, p in enumerate(group.params)}
    strides[("out", 0)] = _item_bytes(group.body.checked_type)
    return RepeatedKernel(name, inner.ops, inner, lead, strides)


def _item_bytes(t: Type) -> int:
    """The bytes of one item of a tensor that leads with a size (0: a weight)."""
    assert isinstance(t, TensorType)
    if t.is_static:
        return 0
    return math.prod(t.shape[1:]) * np.dtype(t.dtype).itemsize


def _taken(kernel: LoopKernel | GemmKernel) -> bool:
    """A loop nest, a float product on packed weights (its scratch, if any, of a fixed
    size: nothing to plan per size), or a BLAS product (its call is planned per size
    anyway) with a loop-nest epilogue."""
    if type(kernel) is GemmKernel:
        return kernel.epilogue is None or type(kernel.epilogue) is LoopKernel
    return type(kernel) is LoopKernel or (
        isinstance(kernel, JitGemmKernel)
        and all(isinstance(d, int) for shape, _ in kernel.scratches for d in shape)
    )


def _product_call(group: Function) -> Call:
    """The product a BLAS group computes (its one dense, matmul or batch_matmul)."""
    return next(
        n
        for n in post_order(group.body)
        if isinstance(n, Call) and getattr(n.op, "name", "") in PRODUCTS
    )


def _bound(template: LoopKernel, sizes: Mapping[str, int]) -> LoopKernel:
    """A copy of a symbolic kernel whose extent, work and buffer shapes are these sizes'
    (what the caller plans with); its code, and so its compiled module, is the template's."""
    k = template.kernel
    kernel_text(k)  # made once and copied to every bound kernel
    buffers = [Buffer(b.name, b.dtype, _static(b.shape, sizes)) for b in k.buffers]
    extent = evaluate(k.extent, sizes) if isinstance(k.extent, Dim) else k.extent
    work = evaluate(k.work, sizes) if isinstance(k.work, Dim) else k.work
    bound = replace(k, buffers=buffers, extent=extent, work=work, symbolic=(k.extent, k.work))
    return replace(template, kernel=bound)


def _static(shape: tuple[int | Dim, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, sizes) if isinstance(d, Dim) else d for d in shape)
