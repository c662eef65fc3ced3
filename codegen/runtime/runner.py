"""The runtime: the linked program run natively, segment by segment, over one arena.

A run writes the inputs' and fresh outputs' addresses into the slot table and calls each
segment's entry function once (codegen/plan/link.py); only host-fallback kernels run in
Python between segments. Parallel launches and GEMM blocks go to the executable's own
native pool (codegen/llvm/native.py): `threads - 1` workers started here, each a Python
thread parked in native code (ctypes releases the GIL), plus the calling thread. That is
the whole thread budget: the BLAS is single-threaded per call (codegen/runtime/blas.py).
"""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..llvm import JitLibrary
from ..llvm.native import STATE_SIZE
from ..plan.every_size import SizeBinding
from ..plan.graph import AliasNode, FieldNode, Graph, KernelNode, Node, ParamNode, storage_root
from ..plan.link import Program, Segment
from ..plan.memory import nbytes
from .sanitizer import check_devices, copy_traffic

ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

WORKER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# where a run puts an output the kernels write: (node id, shape, dtype) -> its array
Place = Callable[[int, tuple[int, ...], "np.dtype[Any]"], np.ndarray]


def _data_field_reader() -> Callable[[np.ndarray], int]:
    """How a run reads an array's data address. `array.ctypes.data` costs ~1.4 us (it
    builds a helper object); NumPy's C struct keeps the pointer right after the object
    header, which CPython's `id` locates, in ~0.2 us. Used only if it agrees with
    `.ctypes.data` on probe arrays here, so another interpreter or NumPy layout falls
    back to the slow, always-right read."""
    header = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    pointer = ctypes.c_void_p.from_address

    def fast(array: np.ndarray) -> int:
        return pointer(id(array) + header).value or 0

    probes = [np.empty(n, dtype) for n, dtype in ((1, "float32"), (1000, "int64"), (0, "u1"))]
    probes.append(np.arange(12.0).reshape(3, 4)[1:])
    if all(fast(p) == p.ctypes.data for p in probes):
        return fast
    return lambda array: array.ctypes.data


address_of = _data_field_reader()


class Runtime:
    """Owns the arena, the slot table and the pool; `run(feeds)` executes the graph."""

    def __init__(
        self,
        program: Program,
        library: JitLibrary | None,
        threads: int | None = None,
        check_devices: bool = False,
    ) -> None:
        self.program, self.library = program, library
        if program.size_names and library is not None:  # a symbolic program's sizes
            library.write_sizes(program.sizes)
        graph = program.graph
        self.graph: Graph = graph
        plan = program.plan
        sizes = plan.arena_bytes or [plan.bytes]
        self.arenas = [np.empty(max(size, 1) + 64, dtype=np.uint8) for size in sizes]
        self.bases = [a.ctypes.data + (-a.ctypes.data) % 64 for a in self.arenas]
        self.slots = np.zeros(max(program.slot_count, 1), dtype=np.int64)
        self.state = np.zeros(STATE_SIZE, dtype=np.int64)
        for slot, array in program.constants:
            self.slots[slot] = array.ctypes.data
        self.capacity_arena = self._arena_addresses(program.arena_slots)
        self.slots[self.capacity_arena[0]] = self.capacity_arena[1]
        self.check_devices = check_devices  # the sanitizer (codegen.check_devices)
        self.thread_count = min(threads or program.threads, program.threads)
        self.copies = copy_traffic(graph, program.devices)  # per run: (src, dst) -> (n, bytes)
        self.runs = 0
        self._constants = [a for _, a in program.constants]  # kept alive with the table
        self.static: dict[int, np.ndarray] = {}  # values that do not change between runs
        for n in graph.nodes:
            if isinstance(n, ParamNode):
                self.static[n.id] = n.value
            elif isinstance(n, KernelNode) and n.shape is not None and self.planned(n.id):
                self.static[n.id] = self.view(n.id, n.shape, n.dtype)  # type: ignore[arg-type]
        # graph outputs computed by kernels: a new array on every run
        self.fresh: list[Node] = [
            n
            for n in graph.nodes
            if isinstance(n, KernelNode) and n.shape is not None and not self.planned(n.id)
        ]
        self.fresh_ids = {n.id for n in self.fresh}
        self.fresh_outputs: list[tuple[int, int, tuple[int, ...], np.dtype[Any]]] = [
            (n.id, program.slot_of[n.id], n.shape or (), np.dtype(n.dtype)) for n in self.fresh
        ]
        self.at: SizeBinding | None = None  # the sizes the runs take now, if any
        self.alias_shapes: dict[int, tuple[int, ...]] = {}  # at them, where they differ
        self.alias_ids = [n.id for n in graph.nodes if isinstance(n, AliasNode)]
        self.fields: dict[int, list[int]] = {}  # a tuple-valued host kernel -> its fields
        for n in graph.nodes:
            if isinstance(n, FieldNode):
                self.fields.setdefault(n.inputs[0], []).append(n.id)
        self.entries: dict[int, Callable[[int, int], None]] = {}
        self.step_fns: dict[int, Callable[[int, int], None]] = {}
        if library is not None:
            for item in program.schedule:
                if isinstance(item, Segment):
                    self.entries[item.index] = self._entry(f"egc_segment_{item.index}")
                    for node_id in item.nodes:
                        self.step_fns[node_id] = self._entry(f"egc_step_{node_id}")
        self.table, self.state_address = self.slots.ctypes.data, self.state.ctypes.data
        self.workers: list[threading.Thread] = []
        self._lock = threading.Lock()  # one run at a time: runs share the arena and slots
        if library is not None and program.parallel:
            self._start_workers(self.thread_count - 1)

    @property
    def threads(self) -> int:
        return self.thread_count

    def planned(self, node_id: int) -> bool:
        return node_id in self.program.plan.offsets

    def view(self, tensor_id: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """A planned tensor's place in the arena."""
        index = self.program.plan.arena_of.get(tensor_id, 0)
        arena = self.arenas[index]
        offset = self.bases[index] - arena.ctypes.data + self.program.plan.offsets[tensor_id]
        return arena[offset : offset + nbytes(shape, dtype)].view(dtype).reshape(shape)

    def _entry(self, name: str) -> Callable[[int, int], None]:
        assert self.library is not None
        return ENTRY(self.library.address(name))

    # ------------------------------------------------------------ workers
    def _start_workers(self, count: int) -> None:
        assert self.library is not None
        worker = WORKER(self.library.address("egc_worker"))
        shutdown = WORKER(self.library.address("egc_shutdown"))
        state = self.state.ctypes.data
        for k in range(count):
            t = threading.Thread(target=worker, args=(state,), name=f"egc-worker-{k}", daemon=True)
            t.start()
            self.workers.append(t)
        # stop the workers before the code they run (and the state they read) is freed
        weakref.finalize(self, _stop, shutdown, self.state, self.workers, self.library)

    # ------------------------------------------------------------ running
    def run(
        self,
        feeds: list[np.ndarray],
        timings: dict[int, float] | None = None,
        at: SizeBinding | None = None,
        place: Place | None = None,
    ) -> list[Any]:
        """Execute the graph; with `timings`, run kernel by kernel and add each one's
        seconds under its node id (the profile); `at`: the sizes of a program built for
        every size; `place`: where each output the kernels write goes (node id, shape,
        dtype -> array; else a new array each run). Runs from several threads take turns."""
        with self._lock:
            if at is not None and at is not self.at:
                self._take_sizes(at)
            return self._run(feeds, timings, place)

    def _take_sizes(self, at: SizeBinding) -> None:
        """Runs from now on at these sizes: the kernels read them, outputs take their
        shapes (planned tensors keep their places, planned for the largest sizes)."""
        if self.library is not None:  # else no native code reads them
            self.library.write_sizes(at.values)
        self.fresh_outputs = [
            (node_id, slot, at.shapes.get(node_id, shape), dtype)
            for node_id, slot, shape, dtype in self.fresh_outputs
        ]
        self.alias_shapes = {i: at.shapes[i] for i in self.alias_ids if i in at.shapes}
        if at.arena is not None or (self.at is not None and self.at.arena is not None):
            slots, addresses = (
                self._arena_addresses(at.arena) if at.arena is not None else self.capacity_arena
            )
            self.slots[slots] = addresses  # planned again at these sizes, or back
        self.at = at

    def _arena_addresses(
        self, arena_slots: Sequence[tuple[int, int, int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The slot of each planned tensor and its address, as arrays for one write."""
        slots = np.array([slot for slot, _, _ in arena_slots], dtype=np.int64)
        addresses = [self.bases[arena] + offset for _, arena, offset in arena_slots]
        return slots, np.array(addresses, dtype=np.int64)

    def _run(
        self, feeds: list[np.ndarray], timings: dict[int, float] | None, place: Place | None
    ) -> list[Any]:
        """One run. `env` holds only what changes between runs (inputs, fresh outputs,
        host results); planned tensors and constants are looked up in `self.static`, so a
        run costs a few microseconds beyond its kernels however large the graph."""
        program, slots, slot_of = self.program, self.slots, self.program.slot_of
        env: dict[int, Any] = {}
        for node, value in zip(self.graph.inputs, feeds, strict=True):
            env[node.id] = value
            slots[slot_of[node.id]] = address_of(value)
        for node_id, slot, shape, dtype in self.fresh_outputs:
            value = np.empty(shape, dtype) if place is None else place(node_id, shape, dtype)
            env[node_id] = value
            slots[slot] = address_of(value)
        if self.check_devices:
            check_devices(self, env)
        self.runs += 1
        table, state = self.table, self.state_address
        for item in program.schedule:
            if isinstance(item, Segment):
                if timings is None:
                    self.entries[item.index](table, state)
                    continue
                for node_id in item.nodes:
                    start = time.perf_counter()
                    self.step_fns[node_id](table, state)
                    timings[node_id] = timings.get(node_id, 0.0) + time.perf_counter() - start
                continue
            start = time.perf_counter()
            self._python_step(item, env)
            if timings is not None:
                timings[item] = timings.get(item, 0.0) + time.perf_counter() - start
        return [self._result(o, env) for o in self.graph.outputs]

    def _value(self, node_id: int, env: dict[int, Any]) -> Any:
        """A node's array (aliases and fields resolved)."""
        if node_id in env:
            return env[node_id]
        if node_id in self.static:
            return self.static[node_id]
        nodes = self.graph.nodes
        n = nodes[node_id]
        if isinstance(n, AliasNode):  # a reshape of its storage root, never an alias itself
            shape = self.alias_shapes.get(node_id, n.shape)
            value = self._value(storage_root(nodes, n).id, env).reshape(shape)
        elif isinstance(n, FieldNode):
            value = np.require(self._value(n.inputs[0], env)[n.index], requirements="C")
            self.slots[self.program.slot_of[n.id]] = value.ctypes.data
        else:
            raise AssertionError(f"node {node_id} ({n.op}) has no value yet")
        env[node_id] = value
        return value

    def _python_step(self, node_id: int, env: dict[int, Any]) -> None:
        n = self.graph.nodes[node_id]
        out = env.get(node_id, self.static.get(node_id))
        result = self.program.python_steps[node_id]([self._value(i, env) for i in n.inputs], out)
        env[node_id] = result
        for field in self.fields.get(node_id, ()):  # fields of a tuple result get their slots
            self._value(field, env)

    def _result(self, node_id: int, env: dict[int, Any]) -> Any:
        value = self._value(node_id, env)
        if isinstance(value, tuple):
            return tuple(np.array(v) for v in value)
        return value if node_id in self.fresh_ids else np.array(value)


def _stop(
    shutdown: Callable[[int], None],
    state: np.ndarray,
    workers: list[threading.Thread],
    library: Any,
) -> None:
    shutdown(state.ctypes.data)
    for t in workers:
        t.join(timeout=5.0)
