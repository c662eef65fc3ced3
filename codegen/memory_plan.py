"""Static memory planning: where each intermediate tensor lives, decided before running.

Tensors are the kernel results in execution order, with a lifetime from the step that writes
them to the last step that reads them. Graph inputs, parameters (constants) and outputs are
never planned (the caller owns them; outputs are fresh arrays handed back). A reshape is an
alias: it shares its source's storage, whose lifetime then extends to the alias's last use.

Two planners:
- `tokens`: TVM's storage tokens — reuse the smallest free token that is large enough, else
  open a new one; the arena is the sum of token sizes;
- `arena` (default): offsets in one arena, placing the largest tensors first at the lowest
  offset that does not overlap a tensor alive at the same time (greedy by size).
Both report the naive total (every tensor its own buffer) and the lower bound: the largest
total size of tensors alive at the same step — no plan can use less.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .graph import Graph, storage_root

ALIGN = 64  # bytes: cache line and AVX-512 vector


def nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Tensor:
    id: int
    nbytes: int
    first: int  # step that writes it
    last: int  # last step that reads it (or first, when unused)


@dataclass
class MemoryPlan:
    """Offsets of the planned tensors, each in the arena of its device (one per device)."""

    offsets: dict[int, int] = field(default_factory=dict)  # tensor id -> byte offset
    bytes: int = 0  # all arenas together
    naive: int = 0
    lower_bound: int = 0
    method: str = "arena"
    device_of: dict[int, int] = field(default_factory=dict)  # tensor id -> device (absent: 0)
    arena_bytes: list[int] = field(default_factory=list)  # per device index
    device_names: list[str] = field(default_factory=lambda: ["cpu:0"])

    def storage_ids(self) -> dict[int, int]:
        """Tensor id -> storage id: tensors at the same place (device, offset) share one."""
        place = {tid: (self.device_of.get(tid, 0), off) for tid, off in self.offsets.items()}
        ranked = {p: k for k, p in enumerate(sorted(set(place.values())))}
        return {tid: ranked[p] for tid, p in place.items()}

    @property
    def bytes_per_device(self) -> dict[str, int]:
        """Arena bytes of each device, by its name (cpu:0, cpu:1, ...)."""
        sizes = self.arena_bytes or [self.bytes]
        return dict(zip(self.device_names, sizes, strict=False))

    @property
    def overhead(self) -> float:
        """How far above the lower bound the plan is (0.0 = optimal)."""
        return self.bytes / self.lower_bound - 1.0 if self.lower_bound else 0.0

    def summary(self) -> str:
        return (
            f"{self.method}: {self.bytes / 2**20:.2f} MiB (lower bound "
            f"{self.lower_bound / 2**20:.2f} MiB, +{self.overhead:.1%}; one buffer each "
            f"{self.naive / 2**20:.2f} MiB)"
        )


def lower_bound(tensors: list[Tensor]) -> int:
    if not tensors:
        return 0
    steps = max(t.last for t in tensors) + 1
    live = [0] * (steps + 1)
    for t in tensors:
        live[t.first] += _align(t.nbytes)
        live[t.last + 1] -= _align(t.nbytes)
    best = running = 0
    for delta in live:
        running += delta
        best = max(best, running)
    return best


def plan_tokens(tensors: list[Tensor]) -> MemoryPlan:
    plan = MemoryPlan(method="tokens")
    token_of: dict[int, int] = {}
    sizes: list[int] = []  # token id -> size
    free: list[int] = []
    ending: dict[int, list[int]] = {}
    by_start = sorted(tensors, key=lambda t: (t.first, t.id))
    for t in by_start:
        for step in sorted(s for s in ending if s < t.first):
            free.extend(ending.pop(step))
        need = _align(t.nbytes)
        fits = [k for k in free if sizes[k] >= need]
        if fits:
            token = min(fits, key=lambda k: sizes[k])
            free.remove(token)
        elif free:
            token = max(free, key=lambda k: sizes[k])  # grow the largest free token
            free.remove(token)
            sizes[token] = need
        else:
            token = len(sizes)
            sizes.append(need)
        token_of[t.id] = token
        ending.setdefault(t.last, []).append(token)
    offsets, acc = [], 0
    for s in sizes:
        offsets.append(acc)
        acc += s
    plan.offsets = {tid: offsets[tok] for tid, tok in token_of.items()}
    plan.bytes = acc
    _finish(plan, tensors)
    return plan


def plan_arena(tensors: list[Tensor]) -> MemoryPlan:
    plan = MemoryPlan(method="arena")
    placed: list[tuple[int, int, Tensor]] = []  # (offset, size, tensor)
    for t in sorted(tensors, key=lambda t: (-t.nbytes, t.first, t.id)):
        need = _align(t.nbytes)
        busy = sorted(
            (off, off + size)
            for off, size, other in placed
            if other.first <= t.last and t.first <= other.last
        )
        offset = 0
        for start, end in busy:
            if offset + need <= start:
                break
            offset = max(offset, end)
        placed.append((offset, need, t))
        plan.offsets[t.id] = offset
        plan.bytes = max(plan.bytes, offset + need)
    _finish(plan, tensors)
    return plan


def _finish(plan: MemoryPlan, tensors: list[Tensor]) -> None:
    plan.naive = sum(_align(t.nbytes) for t in tensors)
    plan.lower_bound = lower_bound(tensors)


def make_plan(tensors: list[Tensor], method: str = "arena") -> MemoryPlan:
    if method == "arena":
        return plan_arena(tensors)
    if method == "tokens":
        return plan_tokens(tensors)
    raise ValueError(f"unknown memory planner '{method}'; known: arena, tokens")


def combine(plans: list[MemoryPlan], names: list[str]) -> MemoryPlan:
    """One plan of several devices' plans (offsets stay relative to each device's arena)."""
    out = MemoryPlan(method=plans[0].method if plans else "arena", device_names=names)
    for device, p in enumerate(plans):
        out.offsets.update(p.offsets)
        out.device_of.update({tid: device for tid in p.offsets if device})
        out.arena_bytes.append(p.bytes)
        out.bytes += p.bytes
        out.naive += p.naive
        out.lower_bound += p.lower_bound
    return out


def scratch_id(node_id: int, k: int = 0) -> int:
    """The planned tensor id of a kernel's k-th scratch buffer (im2col columns, padded
    input, wide convolution rows): negative, so it never meets a node id."""
    return -1 - (node_id * MAX_SCRATCHES + k)


MAX_SCRATCHES = 4


def plan_graph(graph: Graph, method: str = "arena") -> MemoryPlan:
    """Lifetimes of the graph's kernel results (aliases extend their source's) and scratch
    buffers (alive during their kernel only), then a plan; sets each node's storage_id."""
    nodes = graph.nodes
    outputs = {storage_root(nodes, nodes[o]).id for o in graph.outputs}
    last: dict[int, int] = {}
    for step, n in enumerate(nodes):
        for i in n.inputs:
            last[storage_root(nodes, nodes[i]).id] = step
            if nodes[i].op == "field":
                last[nodes[i].inputs[0]] = step
    per_device: list[list[Tensor]] = [[] for _ in graph.devices]
    for step, n in enumerate(nodes):
        if n.kernel is None:
            continue
        tensors = per_device[n.device]
        for k, (shape, dtype) in enumerate(n.kernel.scratches):
            tensors.append(Tensor(scratch_id(n.id, k), nbytes(shape, dtype), step, step))
        if n.shape is None or n.id in outputs:
            continue
        size = nbytes(n.shape, n.dtype)  # type: ignore[arg-type]
        tensors.append(Tensor(n.id, size, step, max(last.get(n.id, step), step)))
    plan = combine([make_plan(t, method) for t in per_device], [d.name for d in graph.devices])
    storage = plan.storage_ids()
    for n in nodes:
        n.storage_id = storage.get(storage_root(nodes, n).id, -1)
    return plan
