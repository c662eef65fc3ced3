"""The graph executor: kernels called in order over statically planned storage.

`build_graph` turns the fused main function into steps (one per kernel, alias or tuple
field), plans memory for the intermediates, and `Executable.run` executes the steps: JIT
kernels through ctypes (which releases the GIL, so the outer loop splits across a small
thread pool), library anchors through numpy/OpenBLAS, host kernels through the reference.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from egraph_ir.interp import interpret
from egraph_ir.types import TensorType, TupleType
from egraph_ir.visitor import post_order

from .llvm import JitLibrary, emit_module
from .loop_ir import Kernel
from .lower import Lowered, lower, primitive_ops
from .memory_plan import MemoryPlan, Tensor, make_plan, nbytes

ALIAS_OPS = {"reshape", "flatten", "squeeze", "expand_dims"}
PARALLEL_WORK = 1 << 24  # element-ops below which one thread beats waking another (~0.1 ms)


@dataclass
class Node:
    """One entry of the graph: what it is, where its value lives."""

    id: int
    op: str  # input, param, kernel, alias, field, tuple
    name: str
    inputs: list[int]
    shape: tuple[int, ...] | None
    dtype: str | None
    kind: str = ""  # loops, library, host for kernels
    lowered: Lowered | None = None
    index: int = 0  # for fields
    value: np.ndarray | None = None  # params
    storage_id: int = -1

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "op": self.op,
            "name": self.name,
            "inputs": self.inputs,
            "storage_id": self.storage_id,
            "device_index": 0,
            "shape": list(self.shape) if self.shape is not None else None,
            "dtype": self.dtype,
        }
        if self.kind:
            entry["kind"] = self.kind
            entry["ops"] = self.lowered.ops if self.lowered else []
        return entry


@dataclass
class Graph:
    nodes: list[Node]
    inputs: list[Node]
    outputs: list[int]
    tuple_output: bool
    plan: MemoryPlan = field(default_factory=MemoryPlan)
    library: JitLibrary | None = None
    source: str = ""


def build_graph(fn: Function, host_fallback: bool, planner: str) -> Graph:
    """Steps for a fused main function (no control flow)."""
    ids: dict[Expr, int] = {}
    nodes: list[Node] = []
    kernels = 0

    def add(node: Node, expr: Expr) -> None:
        ids[expr] = node.id
        nodes.append(node)

    inputs = []
    for p in fn.params:
        t = p.checked_type
        if not isinstance(t, TensorType):
            raise CodegenError(f"input %{p.name_hint} has type {t}; only tensors are supported")
        node = Node(len(nodes), "input", p.name_hint, [], t.shape, t.dtype)
        add(node, p)
        inputs.append(node)
    for e in post_order(fn.body, into_functions=False):
        if e in ids:
            continue
        t = e.checked_type
        shape, dtype = (t.shape, t.dtype) if isinstance(t, TensorType) else (None, None)
        if isinstance(e, Constant):
            add(Node(len(nodes), "param", f"p{len(nodes)}", [], shape, dtype, value=e.data), e)
        elif isinstance(e, Call) and isinstance(e.op, Function) and e.op.attrs.get("Primitive"):
            args = [ids[a] for a in e.args]
            group_ops = primitive_ops(e.op)
            if len(group_ops) == 1 and group_ops[0] in ALIAS_OPS and shape is not None:
                add(Node(len(nodes), "alias", group_ops[0], args, shape, dtype), e)
                continue
            kernels += 1
            lowered = lower(e.op, f"k{kernels}_{'_'.join(group_ops[:3])}", host_fallback)
            node = Node(
                len(nodes), "kernel", lowered.name, args, shape, dtype, lowered.kind, lowered
            )
            if isinstance(t, TupleType):
                node.shape, node.dtype = None, None
            add(node, e)
        elif isinstance(e, TupleGetItem):
            add(
                Node(
                    len(nodes), "field", "field", [ids[e.tuple_value]], shape, dtype, index=e.index
                ),
                e,
            )
        elif isinstance(e, Tuple) and e is fn.body:
            continue
        elif isinstance(e, Var):
            raise CodegenError(f"free variable %{e.name_hint} in the main function")
        else:
            raise CodegenError(
                f"the graph executor cannot run {type(e).__name__} nodes (control flow, "
                "calls of non-primitive functions); run FuseOps on a dataflow function"
            )
    if isinstance(fn.body, Tuple):
        outputs, tuple_output = [ids[f] for f in fn.body.fields], True
    else:
        outputs, tuple_output = [ids[fn.body]], False
    graph = Graph(nodes, inputs, outputs, tuple_output)
    _plan(graph, planner)
    _compile(graph)
    return graph


def _storage_root(nodes: list[Node], n: Node) -> Node:
    while n.op == "alias":
        n = nodes[n.inputs[0]]
    return n


def _plan(graph: Graph, planner: str) -> None:
    """Lifetimes of kernel results (aliases extend their source), then a plan."""
    nodes = graph.nodes
    outputs = {_storage_root(nodes, nodes[o]).id for o in graph.outputs}
    last: dict[int, int] = {}
    for step, n in enumerate(nodes):
        for i in n.inputs:
            root = _storage_root(nodes, nodes[i])
            last[root.id] = step
            if nodes[i].op == "field":
                last[nodes[i].inputs[0]] = step
    tensors = []
    for step, n in enumerate(nodes):
        if n.op != "kernel":
            continue
        if n.lowered is not None and n.lowered.scratch is not None:  # im2col / padded input
            tensors.append(Tensor(scratch_id(n), nbytes(*n.lowered.scratch), step, step))
        if n.shape is None or n.id in outputs:
            continue
        size = nbytes(n.shape, n.dtype)  # type: ignore[arg-type]
        tensors.append(Tensor(n.id, size, step, max(last.get(n.id, step), step)))
    plan = make_plan(tensors, planner)
    storage = plan.storage_ids()
    for n in nodes:
        n.storage_id = storage.get(_storage_root(nodes, n).id, -1)
    graph.plan = plan


def scratch_id(n: Node) -> int:
    return -1 - n.id


def _compile(graph: Graph) -> None:
    kernels = [
        k
        for n in graph.nodes
        if n.lowered
        for k in (n.lowered.prologue, n.lowered.anchor_kernel, n.lowered.kernel)
        if k is not None
    ]
    if not kernels:
        return
    graph.source = emit_module(kernels)
    graph.library = JitLibrary(graph.source)


@dataclass
class _Bound:
    """What one kernel node needs at run time, resolved once when the runner is made."""

    out: np.ndarray | None  # its planned view (None: a graph output, fresh every run)
    scratch: np.ndarray | None
    constants: list[int]  # addresses of the epilogue kernel's constant buffers
    kernel: Callable[..., None] | None
    prologue: Callable[..., None] | None
    anchor: Callable[..., None] | None


class Runner:
    """Executes a graph; owns the arena, the compiled functions and the thread pool."""

    def __init__(self, graph: Graph, threads: int) -> None:
        self.graph = graph
        self.arena = np.empty(max(graph.plan.bytes, 1) + 64, dtype=np.uint8)
        self.base = (-self.arena.ctypes.data) % 64
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(self.threads - 1) if self.threads > 1 else None
        self.output_roots = {_storage_root(graph.nodes, graph.nodes[o]).id for o in graph.outputs}
        self.bound = {n.id: self._bind(n) for n in graph.nodes if n.lowered is not None}

    def _bind(self, n: Node) -> _Bound:
        lowered = n.lowered
        assert lowered is not None
        fresh = n.id in self.output_roots or n.shape is None
        out = None if fresh else self.view(n.id, n.shape, n.dtype)  # type: ignore[arg-type]
        scratch = self.view(scratch_id(n), *lowered.scratch) if lowered.scratch else None

        def function(kernel: Kernel | None) -> Callable[..., None] | None:
            if kernel is None or self.graph.library is None:
                return None
            return self.graph.library.function(kernel.name, len(kernel.buffers))

        constants = []
        if lowered.kernel is not None:
            named = lowered.constants
            buffers = lowered.kernel.buffers
            constants = [named[b.name].ctypes.data for b in buffers if b.name in named]
        return _Bound(
            out,
            scratch,
            constants,
            function(lowered.kernel),
            function(lowered.prologue),
            function(lowered.anchor_kernel),
        )

    def view(self, tensor_id: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """A planned tensor's place in the arena."""
        offset = self.base + self.graph.plan.offsets[tensor_id]
        return self.arena[offset : offset + nbytes(shape, dtype)].view(dtype).reshape(shape)

    def run(self, feeds: list[np.ndarray]) -> list[Any]:
        env: list[Any] = [None] * len(self.graph.nodes)
        for node, value in zip(self.graph.inputs, feeds, strict=True):
            env[node.id] = value
        for n in self.graph.nodes:
            if n.op == "param":
                env[n.id] = n.value
            elif n.op == "alias":
                env[n.id] = env[n.inputs[0]].reshape(n.shape)
            elif n.op == "field":
                env[n.id] = env[n.inputs[0]][n.index]
            elif n.op == "kernel":
                env[n.id] = self.run_kernel(n, [env[i] for i in n.inputs])
        results: list[Any] = []
        for o in self.graph.outputs:
            value = env[o]
            if isinstance(value, tuple):
                results.append(tuple(np.array(v) for v in value))
                continue
            fresh = self.graph.nodes[o].op == "kernel" and self.graph.nodes[o].shape is not None
            results.append(value if fresh else np.array(value))
        return results

    def run_kernel(self, n: Node, args: list[np.ndarray]) -> Any:
        lowered, bound = n.lowered, self.bound[n.id]
        assert lowered is not None
        if lowered.kind == "host":
            result = interpret(lowered.function, *args)  # type: ignore[arg-type]
            if n.shape is None:
                return tuple(np.asarray(r) for r in result)
        out = bound.out if bound.out is not None else np.empty(n.shape or (), n.dtype)
        if lowered.kind == "host":
            out[...] = result
            return out
        scratch = bound.scratch
        if lowered.prologue is not None and scratch is not None:
            source = args[lowered.prologue_input].ctypes.data
            prologue = lowered.prologue
            self.call(bound.prologue, [source, scratch.ctypes.data], prologue.extent, prologue.work)  # type: ignore[arg-type]
        if lowered.library is not None:
            lowered.library(args, out, scratch)
        anchor = lowered.anchor_kernel
        if anchor is not None and scratch is not None:
            w = lowered.anchor_weights
            weights = args[w] if isinstance(w, int) else w
            assert weights is not None
            addresses = [scratch.ctypes.data, weights.ctypes.data, out.ctypes.data]
            self.call(bound.anchor, addresses, anchor.extent, anchor.work)  # type: ignore[arg-type]
        kernel = lowered.kernel
        if kernel is not None:
            addresses = [a.ctypes.data for a in args] + bound.constants + [out.ctypes.data]
            self.call(bound.kernel, addresses, kernel.extent, kernel.work)  # type: ignore[arg-type]
        return out

    def call(self, fn: Callable[..., None], addresses: list[int], extent: int, work: float) -> None:
        if self.pool is None or extent < 2 or work < PARALLEL_WORK:
            fn(*addresses, 0, extent)
            return
        parts = min(self.threads, extent)
        bounds = [extent * k // parts for k in range(parts + 1)]
        futures = [
            self.pool.submit(fn, *addresses, bounds[k], bounds[k + 1]) for k in range(1, parts)
        ]
        fn(*addresses, bounds[0], bounds[1])
        for f in futures:
            f.result()


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def graph_json(graph: Graph) -> str:
    return json.dumps(
        {
            "nodes": [n.to_json() for n in graph.nodes],
            "heads": graph.outputs,
            "arena_bytes": graph.plan.bytes,
        },
        indent=1,
    )
