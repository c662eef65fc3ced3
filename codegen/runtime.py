"""The runtime: bound kernel steps called in order over the planned arena.

One thread budget (`codegen.num_threads`) covers everything the executable runs: JIT loop
nests split their outer loop, products are cut into single-threaded GEMM blocks
(codegen/blas.py), and nothing else starts threads. Work is handed out in chunks that
whichever thread is free claims next, so when another process holds a core the caller
finishes the remaining chunks itself instead of waiting for a descheduled worker; it
waits only for chunks already running.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import blas
from .graph import Graph, Node, storage_root
from .kernels import Step
from .llvm import JitLibrary
from .loop_ir import Kernel
from .memory_plan import MemoryPlan, nbytes, scratch_id

PARALLEL_WORK = 1 << 21  # element-ops below which one thread beats a hand-off (~20 us)
PARALLEL_FLOPS = 1 << 22  # the same for a GEMM
CHUNKS_PER_THREAD = 4  # finer chunks keep both cores busy when one is slowed down


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Pool:
    """Runs `task(i)` for i in range(n) on the caller plus `threads - 1` workers."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._workers = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 else None

    def map(self, task: Callable[[int], None], n: int) -> None:
        if self._workers is None or n < 2:
            for i in range(n):
                task(i)
            return
        claim = itertools.count()  # next() is atomic under the GIL
        done = threading.Event()
        finished = itertools.count(1)
        errors: list[BaseException] = []

        def drain() -> None:
            while (i := next(claim)) < n:
                try:
                    task(i)
                except BaseException as exc:  # re-raised by the caller
                    errors.append(exc)
                if next(finished) == n:
                    done.set()

        for _ in range(min(self.threads - 1, n - 1)):
            self._workers.submit(drain)
        drain()
        done.wait()
        if errors:
            raise errors[0]

    def close(self) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=False)


class Runtime:
    """Owns the arena, the compiled library and the pool; `run(feeds)` executes the graph."""

    def __init__(
        self, graph: Graph, plan: MemoryPlan, library: JitLibrary | None, threads: int
    ) -> None:
        self.graph, self.plan, self.library = graph, plan, library
        self.pool = Pool(threads)
        self.blas = blas.library()
        self.arena = np.empty(max(plan.bytes, 1) + 64, dtype=np.uint8)
        self.base = (-self.arena.ctypes.data) % 64
        self.output_roots = {storage_root(graph.nodes, graph.nodes[o]).id for o in graph.outputs}
        self.steps: dict[int, tuple[Step, np.ndarray | None]] = {}
        for n in graph.nodes:
            if n.kernel is not None:
                scratch = (
                    self.view(scratch_id(n.id), *n.kernel.scratch) if n.kernel.scratch else None
                )
                self.steps[n.id] = (n.kernel.bind(self, scratch), self._planned_out(n))

    @property
    def threads(self) -> int:
        return self.pool.threads

    # ------------------------------------------------------------ Launcher
    def function(self, kernel: Kernel) -> Callable[..., None]:
        assert self.library is not None, "a kernel with JIT code needs the compiled library"
        return self.library.function(kernel.name, len(kernel.buffers))

    def launch(
        self, fn: Callable[..., None], addresses: list[int], extent: int, work: float
    ) -> None:
        parts = min(extent, self.pool.threads * CHUNKS_PER_THREAD)
        if self.pool.threads == 1 or parts < 2 or work < PARALLEL_WORK:
            fn(*addresses, 0, extent)
            return
        bounds = [extent * k // parts for k in range(parts + 1)]
        self.pool.map(lambda k: fn(*addresses, bounds[k], bounds[k + 1]), parts)

    def gemm(self, product: blas.Product, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        if product.dtype not in self.blas.gemm:
            blas.numpy_product(product, a, b, c)
            return
        threads = self.pool.threads if product.flops >= PARALLEL_FLOPS else 1
        blocks = product.blocks(threads * CHUNKS_PER_THREAD if threads > 1 else 1)
        pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
        run = self.blas.run
        if len(blocks) == 1 or threads == 1:
            for block in blocks:
                run(product, block, pa, pb, pc)
            return
        self.pool.map(lambda i: run(product, blocks[i], pa, pb, pc), len(blocks))

    # ------------------------------------------------------------ memory
    def view(self, tensor_id: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """A planned tensor's place in the arena."""
        offset = self.base + self.plan.offsets[tensor_id]
        return self.arena[offset : offset + nbytes(shape, dtype)].view(dtype).reshape(shape)

    def _planned_out(self, n: Node) -> np.ndarray | None:
        if n.id in self.output_roots or n.shape is None:
            return None  # a graph output (fresh every run) or a tuple
        return self.view(n.id, n.shape, n.dtype)  # type: ignore[arg-type]

    # ------------------------------------------------------------ running
    def run(self, feeds: list[np.ndarray], timings: dict[int, float] | None = None) -> list[Any]:
        """Execute the graph; with `timings`, add each kernel's seconds under its node id."""
        graph = self.graph
        env: list[Any] = [None] * len(graph.nodes)
        for node, value in zip(graph.inputs, feeds, strict=True):
            env[node.id] = value
        for n in graph.nodes:
            if n.op == "param":
                env[n.id] = n.value
            elif n.op == "alias":
                env[n.id] = env[n.inputs[0]].reshape(n.shape)
            elif n.op == "field":
                env[n.id] = env[n.inputs[0]][n.index]
            elif n.op == "kernel":
                step, out = self.steps[n.id]
                if out is None and n.shape is not None:
                    out = np.empty(n.shape, n.dtype)
                start = time.perf_counter() if timings is not None else 0.0
                result = step([env[i] for i in n.inputs], out)  # type: ignore[arg-type]
                env[n.id] = out if out is not None else result
                if timings is not None:
                    timings[n.id] = timings.get(n.id, 0.0) + time.perf_counter() - start
        results: list[Any] = []
        for o in graph.outputs:
            value = env[o]
            if isinstance(value, tuple):
                results.append(tuple(np.array(v) for v in value))
                continue
            fresh = graph.nodes[o].op == "kernel" and graph.nodes[o].shape is not None
            results.append(value if fresh else np.array(value))
        return results

    def close(self) -> None:
        self.pool.close()
