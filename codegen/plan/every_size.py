"""One program for every size: a symbolic program built once, at its capacity (the
largest sizes it is planned for), runs at any smaller sizes without Python work per size.

The build at the capacity is an ordinary specialisation (codegen/lower/symbolic.py) whose
every size-dependent group took a kernel with run-time extents: its loops, offsets and
launch splits read `egc_sizes`, which the runtime writes. What else changes with the sizes
is data, not code: the arena is planned at the capacity, and a tensor at smaller sizes
fits in its slot (checked per set of sizes, since a size polynomial may shrink as a size
grows); outputs are allocated at their shapes at the sizes; aliases are reshaped to them.
Such a program keeps, per node whose shape names a size, that shape
(`Program.symbolic_shapes`); a `SizeTable` evaluates them for a set of sizes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from egraph_ir.dims import DimLike, evaluate, is_static

from ..lower.kinds import CompiledKernel
from .graph import FieldNode, Graph, KernelNode
from .link import Program
from .memory import MemoryPool, nbytes, plan_graph

log = logging.getLogger(__name__)

Shape = tuple[DimLike, ...]
# arenas from which planning again at smaller sizes pays: below, the tensors sit in the
# caches wherever they are, and a decoder binding a new length per token saves the plan
COMPACT_FROM = 1 << 20


@dataclass(frozen=True, eq=False)
class SizeBinding:
    """A program built for every size at one set of sizes: the values its kernels read
    (egc_sizes, in the program's order) and the shape, at them, of each node whose shape
    names a size."""

    values: tuple[int, ...]
    shapes: dict[int, tuple[int, ...]]
    # the arena's tensors at these sizes need under a quarter of the capacity's room (of
    # at least COMPACT_FROM bytes): worth planning again, compactly (Executable.at_sizes)
    sparse: bool = False
    arena: tuple[tuple[int, int, int], ...] | None = None  # (slot, arena, offset) if so


def symbolic_shapes(
    graph: Graph, shapes: Graph, capacity: Mapping[str, int]
) -> dict[int, Shape] | None:
    """Node id -> symbolic shape of each node of `graph` (built at `capacity`) whose shape
    names a size, read off `shapes` (the symbolic program's graph, build_graph without
    kernels); None where the two do not pair node for node or a node's value is a tuple."""
    if len(graph.nodes) != len(shapes.nodes):
        return None
    found: dict[int, Shape] = {}
    for node, symbolic in zip(graph.nodes, shapes.nodes, strict=True):
        if type(node) is not type(symbolic) or node.inputs != symbolic.inputs:
            return None
        if node.shape is None or symbolic.shape is None:
            return None  # a tuple-valued kernel: its fields' places are not planned here
        if is_static(symbolic.shape):
            if symbolic.shape != node.shape:
                return None
            continue
        at_capacity = tuple(evaluate(d, capacity) for d in symbolic.shape)
        if isinstance(node, FieldNode) or at_capacity != node.shape:
            return None
        found[node.id] = symbolic.shape
    return found


def serves_every_size(program: Program) -> str:
    """Why a program built at a capacity cannot run other sizes ("" when it can): a step
    in Python (it was given its shapes), or a scratch buffer whose size names a size."""
    if program.python_steps:
        return "a kernel runs in Python"
    for node in program.graph.nodes:
        kernel: CompiledKernel | None = node.kernel if isinstance(node, KernelNode) else None
        if kernel is not None and not all(is_static(shape) for shape, _ in kernel.scratches):
            return f"kernel {kernel.name} has a scratch buffer of symbolic size"
    return ""


class SizeTable:
    """What binding a program built for every size to a set of sizes reads, made once:
    the distinct size polynomials of its shapes (a decoder's dozens of shapes hold a few),
    each node's shape as constants and indices into them, and the bytes planned for each
    arena tensor among them."""

    def __init__(self, program: Program) -> None:
        self.size_names = program.size_names
        index: dict[DimLike, int] = {}
        self.rows: list[tuple[int, tuple[tuple[bool, int], ...], int, int]] = []
        nodes, offsets = program.graph.nodes, program.plan.offsets
        for node_id, shape in program.symbolic_shapes.items():
            node = nodes[node_id]
            form = tuple(
                (True, d) if isinstance(d, int) else (False, index.setdefault(d, len(index)))
                for d in shape
            )
            itemsize = np.dtype(node.dtype).itemsize
            planned = nbytes(node.shape, node.dtype) if node_id in offsets else -1  # type: ignore[arg-type]
            self.rows.append((node_id, form, itemsize, planned))
        self.dims = list(index)
        self.planned = sum(planned for *_, planned in self.rows if planned >= 0)

    def bind(self, sizes: Mapping[str, int]) -> SizeBinding | None:
        """The program at `sizes`, or None where one of its planned tensors would need
        more room than it has (the sizes exceed the capacity) or a size is negative."""
        values = [evaluate(d, sizes) for d in self.dims]
        if min(values, default=0) < 0:
            return None
        shapes: dict[int, tuple[int, ...]] = {}
        used = 0
        for node_id, form, itemsize, planned in self.rows:
            shape = tuple(v if constant else values[v] for constant, v in form)
            need = math.prod(shape) * itemsize
            if planned >= 0 and need > planned:
                return None
            used += need if planned >= 0 else 0
            shapes[node_id] = shape
        sparse = 4 * used <= self.planned and self.planned >= COMPACT_FROM
        return SizeBinding(tuple(int(sizes[n]) for n in self.size_names), shapes, sparse)


def compact_arena(
    program: Program, binding: SizeBinding, method: str, pools: tuple[MemoryPool, ...]
) -> SizeBinding:
    """The binding with the arena planned again at its sizes, where that fits the
    arenas planned at the capacity (their memory is what the runtime has): tensors close
    together, as a build at these sizes would place them, not a capacity's slot apart."""
    plan = plan_graph(program.graph, program.devices, method, pools, binding.shapes)
    had = program.plan.arena_bytes or [program.plan.bytes]
    now = plan.arena_bytes or [plan.bytes]
    if len(now) != len(had) or any(a > b for a, b in zip(now, had, strict=True)):
        return binding
    if any(key not in plan.offsets for key in program.arena_keys):
        return binding  # a loaded program: its kernels (and their scratch) are not known
    arena = tuple(
        (slot, plan.arena_of.get(key, 0), plan.offsets[key])
        for (slot, _, _), key in zip(program.arena_slots, program.arena_keys, strict=True)
    )
    return replace(binding, arena=arena)


__all__ = ["SizeBinding", "SizeTable", "compact_arena", "serves_every_size", "symbolic_shapes"]
