"""Link: the graph's kernels as native calls over a table of buffer addresses.

Every value the native code touches gets a slot in one int64 table: graph inputs and
outputs (written on each run), constants, arena tensors and scratch buffers (written once).
Each kernel's native calls become a step function; consecutive native steps form a segment
that runs with one call from Python. A kernel without native code (the numpy host
fallback) ends a segment and runs in Python between two. The thread budget is fixed here:
a launch is cut into chunks, or a product into GEMM blocks, only when the work is large
enough to pay for handing it to another thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from egraph_ir.dims import Dim

from ..llvm.entries import (
    CHUNKS_PER_THREAD,
    PARALLEL_FLOPS,
    PARALLEL_WORK,
    EntryEmitter,
    GemmCall,
    LaunchCall,
    RepeatCall,
    SizedGemmCall,
)
from ..llvm.native import emit_pool
from ..llvm.sizes import define_sizes
from ..lower.kinds import BufferRef, Gemm, Launch, NativeCall, PythonStep, Repeat
from ..runtime.blas import Product, SizedProduct
from .devices import DevicePlan
from .graph import Graph, KernelNode, Node, ParamNode, storage_root
from .memory import MemoryPlan, scratch_id

NativeStep = LaunchCall | GemmCall | SizedGemmCall | RepeatCall


@dataclass
class Segment:
    """Consecutive native steps, run by `egc_segment_<index>`."""

    index: int
    nodes: list[int]


@dataclass
class Program:
    """What the runtime needs besides the compiled code."""

    graph: Graph
    plan: MemoryPlan
    threads: int
    devices: DevicePlan
    slot_count: int = 0
    slot_of: dict[int, int] = field(default_factory=dict)  # node id -> slot
    constants: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (slot, array)
    arena_slots: list[tuple[int, int, int]] = field(default_factory=list)  # slot, arena, offset
    arena_keys: list[int] = field(default_factory=list)  # the plan's key of each (saved, checked)
    slot_device: dict[int, int] = field(default_factory=dict)  # slot -> device of its memory
    calls: dict[int, list[NativeStep]] = field(default_factory=dict)  # native steps
    python_steps: dict[int, PythonStep] = field(default_factory=dict)
    schedule: list[Segment | int] = field(default_factory=list)  # a segment or a python node
    parallel: bool = False  # some call is split over threads
    uses_blas: bool = False  # some call is a BLAS product (its symbols must be registered)
    sizes: tuple[int, ...] = ()  # a specialisation's sizes, which its kernels may read
    size_names: tuple[str, ...] = ()  # their names, in egc_sizes order
    # built for every size up to `sizes` (codegen/plan/every_size.py): node id -> the shape
    # naming the sizes of each node whose shape depends on them
    symbolic_shapes: dict[int, tuple[int | Dim, ...]] = field(default_factory=dict)

    def new_slot(self) -> int:
        self.slot_count += 1
        return self.slot_count - 1

    def glue_key(self) -> str:
        """What the glue module's code depends on (not the sizes' values, which the
        runtime writes): specialisations with the same key share its text and object."""
        return repr((self.schedule, self.calls, self.threads, self.size_names))

    def extend(self, module: ir.Module) -> None:
        """Emit the pool, one function per native step and one per segment."""
        if self.size_names:
            define_sizes(module)  # the runtime writes its values (JitLibrary.write_sizes)
        entries = EntryEmitter(module, emit_pool(module), self.size_names)
        for item in self.schedule:
            if isinstance(item, Segment):
                steps = [entries.step(n, self.calls[n]) for n in item.nodes]
                entries.segment(item.index, steps)


def link(graph: Graph, devices: DevicePlan, plan: MemoryPlan, threads: int, sizes=None) -> Program:
    """Slots, native calls and the schedule for a planned graph; `sizes`: {name: value}."""
    program = Program(graph, plan, max(1, threads), devices)
    program.sizes, program.size_names = tuple((sizes or {}).values()), tuple(sizes or {})
    nodes = graph.nodes
    outputs = {storage_root(nodes, nodes[o]).id for o in graph.outputs}
    constant_slots: dict[tuple[int, int], int] = {}
    home: dict[int, int] = {}  # id(array) -> the device holding the array itself

    def constant_slot(array: np.ndarray, device: int, slot: int = -1) -> int:
        """The slot of a constant on a device: another device reads its own copy."""
        key = (id(array), device)
        if slot < 0 and key in constant_slots:
            return constant_slots[key]
        slot = slot if slot >= 0 else program.new_slot()
        constant_slots.setdefault(key, slot)
        same = home.setdefault(id(array), device) == device
        program.constants.append(
            (slot, np.require(array, requirements="C") if same else array.copy())
        )
        program.slot_device[slot] = device
        return slot

    for n in nodes:
        root = storage_root(nodes, n)
        if root is not n:
            program.slot_of[n.id] = program.slot_of[root.id]
            continue
        if isinstance(n, KernelNode) and n.shape is None:
            continue  # a tuple: its fields get slots
        slot = program.new_slot()
        program.slot_of[n.id] = slot
        program.slot_device[slot] = devices.of(n.id)
        if isinstance(n, ParamNode):
            constant_slot(n.value, devices.of(n.id), slot)
        elif isinstance(n, KernelNode) and n.id not in outputs:
            program.arena_slots.append((slot, plan.arena_of.get(n.id, 0), plan.offsets[n.id]))
            program.arena_keys.append(n.id)
    segment: list[int] = []
    for n in nodes:
        if not isinstance(n, KernelNode) or n.kernel is None:
            continue
        native = n.kernel.native_calls()
        if native is None:
            if segment:
                program.schedule.append(Segment(len(program.schedule), segment))
                segment = []
            program.schedule.append(n.id)
            program.python_steps[n.id] = n.kernel.python_step()
            continue
        scratches = []
        for k in range(len(n.kernel.scratches)):
            scratches.append(program.new_slot())
            program.slot_device[scratches[-1]] = devices.of(n.id)
            tid = scratch_id(n.id, k)
            program.arena_slots.append(
                (scratches[-1], plan.arena_of.get(tid, 0), plan.offsets[tid])
            )
            program.arena_keys.append(tid)

        def resolve(ref: BufferRef, node: Node = n, scratch_slots: list[int] = scratches) -> int:
            copy_source = devices.source_of(node.id)
            reads_on = copy_source if copy_source >= 0 else devices.of(node.id)
            if ref.kind == "input":
                source = storage_root(nodes, nodes[node.inputs[ref.index]])
                if isinstance(source, ParamNode) and devices.of(source.id) != reads_on:
                    return constant_slot(source.value, reads_on)
                return program.slot_of[node.inputs[ref.index]]
            if ref.kind == "out":
                return program.slot_of[node.id]
            if ref.kind == "scratch":
                return scratch_slots[ref.index]
            assert ref.array is not None
            return constant_slot(ref.array, reads_on)

        program.calls[n.id] = [_resolve(call, resolve, program) for call in native]
        segment.append(n.id)
    if segment:
        program.schedule.append(Segment(len(program.schedule), segment))
    return program


def _resolve(call: NativeCall, resolve: Callable[[BufferRef], int], program: Program) -> NativeStep:
    """A native call with its buffers as slots, cut into chunks or GEMM blocks."""
    threads = program.threads
    if isinstance(call, Repeat):  # each item's buffers: the slot's address moved on
        refs = [r for c in call.calls for r in (c.buffers if isinstance(c, Launch) else ())]
        refs += [r for c in call.calls if isinstance(c, Gemm) for r in (c.a, c.b, c.c)]
        strides = {resolve(r): call.strides.get((r.kind, r.index), 0) for r in refs}
        inner = [_resolve(c, resolve, program) for c in call.calls]
        return RepeatCall(call.count, inner, {s: n for s, n in strides.items() if n})  # type: ignore[arg-type]
    if isinstance(call, Launch):
        k = call.kernel
        launch_slots = [resolve(r) for r in call.buffers]
        if k.symbolic is not None:  # extent, work and split computed from the sizes
            program.parallel |= threads > 1
            extent, work = k.symbolic
            return LaunchCall(k.name, launch_slots, extent, None, work, threads)
        assert isinstance(k.extent, int), "a symbolic kernel is bound to its sizes before"
        chunks = 1
        if threads > 1 and k.extent > 1 and k.work >= PARALLEL_WORK:
            chunks = min(k.extent, threads * CHUNKS_PER_THREAD)
            program.parallel = True
        return LaunchCall(k.name, launch_slots, k.extent, chunks)
    assert isinstance(call, Gemm)
    p = call.product
    program.uses_blas = True
    if isinstance(p, SizedProduct):  # blocks cut when it runs, from the sizes
        program.parallel |= threads > 1
        slots = (resolve(call.a), resolve(call.b), resolve(call.c))
        return SizedGemmCall(p, slots, threads)
    parallel = threads > 1 and p.flops >= PARALLEL_FLOPS
    program.parallel |= parallel
    blocks = p.blocks(threads * CHUNKS_PER_THREAD if parallel else 1)
    size = np.dtype(p.dtype).itemsize
    rows = [(b.a * size, b.b * size, b.c * size, b.m, b.n) for b in blocks]
    slots = (resolve(call.a), resolve(call.b), resolve(call.c))
    return GemmCall(p.dtype, slots, p.trans_a, p.trans_b, p.k, p.lda, p.ldb, p.n, rows, parallel)


__all__ = ["Product", "Program", "Segment", "link"]
