"""Static memory planning: where each intermediate tensor lives, decided before running.

Tensors are the kernel results in execution order, with a lifetime from the step that writes
them to the last step that reads them. Graph inputs, parameters (constants) and outputs are
never planned (the caller owns them; outputs are fresh arrays handed back). A reshape is an
alias: it shares its source's storage, whose lifetime then extends to the alias's last use.

Planners (a registry: `register_memory_planner`, config `codegen.memory_planner`):
- `tokens`: TVM's storage tokens — reuse the smallest free token that is large enough (and
  at most 16x larger), else open a new one; the arena is the sum of token sizes;
- `arena` (default): offsets in one arena, placing the largest tensors first at the lowest
  offset that does not overlap a tensor alive at the same time (USMP's greedy by size);
- `conflicts`: the same placement, tensors with the most live neighbours first (USMP's
  greedy by conflicts);
- `hill-climb`: from the better greedy order, swaps of two tensors that do not grow it.
Every plan is checked (placed, inside the arena, no live overlap) before it is used.

Memory pools (config `codegen.memory_pools`, e.g. "sram:256K,dram"): named arenas on every
device, filled in order; a pool with a size keeps what fits and spills the rest onward.
Both report the naive total (every tensor its own buffer) and the lower bound: the largest
total size of tensors alive at the same step — no plan can use less.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from egraph_ir.errors import CodegenError

from .devices import DevicePlan
from .graph import FieldNode, Graph, KernelNode, storage_root

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


@dataclass(frozen=True)
class MemoryPool:
    """A named memory region, planned as an arena of its own on every device; at most
    `size` bytes (None: no limit). Pools are filled in the order given (USMP's pools): a
    tensor that does not fit in one spills to the next."""

    name: str
    size: int | None = None

    def __str__(self) -> str:
        return self.name if self.size is None else f"{self.name}:{self.size}"


DEFAULT_POOLS = (MemoryPool("workspace"),)


def parse_pools(spec: str) -> tuple[MemoryPool, ...]:
    """`"sram:262144,dram"` -> pools in priority order; a size is bytes, with an optional
    K, M or G suffix (powers of 1024). The empty string is the default single pool."""
    if not spec.strip():
        return DEFAULT_POOLS
    pools = []
    for item in spec.split(","):
        name, _, size_text = item.strip().partition(":")
        if not name.isidentifier():
            raise CodegenError(f"memory pool {item.strip()!r}: a name is a word (e.g. sram:64K)")
        size = None
        if size_text:
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size_text[-1:].upper(), 1)
            digits = size_text[:-1] if scale > 1 else size_text
            if not digits.isdigit() or int(digits) <= 0:
                raise CodegenError(
                    f"memory pool {name}: size {size_text!r} is not a positive number of bytes"
                )
            size = int(digits) * scale
        pools.append(MemoryPool(name, size))
    names = [p.name for p in pools]
    if len(set(names)) < len(names):
        raise CodegenError(f"memory pools repeat a name: {', '.join(names)}")
    return tuple(pools)


@dataclass
class MemoryPlan:
    """Offsets of the planned tensors, each in its arena: one per device and memory pool."""

    offsets: dict[int, int] = field(default_factory=dict)  # tensor id -> byte offset
    bytes: int = 0  # all arenas together
    naive: int = 0
    lower_bound: int = 0
    method: str = "arena"
    arena_of: dict[int, int] = field(default_factory=dict)  # tensor id -> arena (absent: 0)
    arena_bytes: list[int] = field(default_factory=list)  # per arena
    arena_names: list[str] = field(default_factory=lambda: ["cpu:0"])  # device[/pool]
    arena_device: list[int] = field(default_factory=lambda: [0])  # arena -> device index
    device_names: list[str] = field(default_factory=lambda: ["cpu:0"])
    sizes: dict[int, int] = field(default_factory=dict)  # tensor id -> aligned bytes

    @property
    def device_of(self) -> dict[int, int]:
        """Tensor id -> device index (tensors of device 0 are left out)."""
        out = {tid: self.arena_device[a] for tid, a in self.arena_of.items()}
        return {tid: d for tid, d in out.items() if d}

    @property
    def bytes_per_pool(self) -> dict[str, int]:
        """Arena bytes of each (device, pool), by name: `cpu:0` with the single default
        pool, `cpu:0/sram` with named pools."""
        return dict(zip(self.arena_names, self.arena_bytes or [self.bytes], strict=False))

    def storage_sizes(self) -> list[int]:
        """Bytes of each storage id (the largest tensor placed there), in id order."""
        ids = self.storage_ids()
        out = [0] * (max(ids.values(), default=-1) + 1)
        for tid, sid in ids.items():
            out[sid] = max(out[sid], self.sizes.get(tid, 0))
        return out

    def storage_ids(self) -> dict[int, int]:
        """Tensor id -> storage id: tensors at the same place (device, offset) share one."""
        place = {tid: (self.arena_of.get(tid, 0), off) for tid, off in self.offsets.items()}
        ranked = {p: k for k, p in enumerate(sorted(set(place.values())))}
        return {tid: ranked[p] for tid, p in place.items()}

    @property
    def bytes_per_device(self) -> dict[str, int]:
        """Arena bytes of each device (its pools together), by its name (cpu:0, cpu:1, ...)."""
        out = dict.fromkeys(self.device_names, 0)
        for arena, size in enumerate(self.arena_bytes or [self.bytes]):
            out[self.device_names[self.arena_device[arena]]] += size
        return out

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


TOKEN_MATCH_RANGE = 16  # TVM: a free token is reused only within 16x of the request's size


def plan_tokens(tensors: list[Tensor]) -> MemoryPlan:
    """TVM's storage tokens: the smallest free token of at least the request's size and at
    most TOKEN_MATCH_RANGE times it; else the largest free token of at least 1/16 of it,
    grown; else a new token."""
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
        fits = [k for k in free if need <= sizes[k] <= need * TOKEN_MATCH_RANGE]
        small = [k for k in free if need // TOKEN_MATCH_RANGE <= sizes[k] < need]
        if fits:
            token = min(fits, key=lambda k: sizes[k])
            free.remove(token)
        elif small:
            token = max(small, key=lambda k: sizes[k])  # grow the largest close-enough token
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
    return plan


def _place(order: list[Tensor]) -> tuple[dict[int, int], int]:
    """First fit in the given order: each tensor at the lowest offset clear of the tensors
    already placed that are alive at the same time."""
    offsets: dict[int, int] = {}
    placed: list[tuple[int, int, Tensor]] = []  # (offset, size, tensor)
    top = 0
    for t in order:
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
        offsets[t.id] = offset
        top = max(top, offset + need)
    return offsets, top


def plan_arena(tensors: list[Tensor]) -> MemoryPlan:
    """Greedy by size (TVM USMP's greedy_by_size): the largest tensors first."""
    order = sorted(tensors, key=lambda t: (-t.nbytes, t.first, t.id))
    return _plan_from(order, "arena")


def plan_by_conflicts(tensors: list[Tensor]) -> MemoryPlan:
    """Greedy by conflicts (USMP's greedy_by_conflicts): tensors alive alongside the most
    bytes of others first (the hardest to fit), then by size."""
    pressure = {t.id: 0 for t in tensors}
    by_start = sorted(tensors, key=lambda t: t.first)
    for i, t in enumerate(by_start):
        for o in by_start[i + 1 :]:
            if o.first > t.last:
                break
            pressure[t.id] += _align(o.nbytes)
            pressure[o.id] += _align(t.nbytes)
    order = sorted(tensors, key=lambda t: (-pressure[t.id], -t.nbytes, t.id))
    return _plan_from(order, "conflicts")


HILL_CLIMB_STEPS = 300


def plan_hill_climb(tensors: list[Tensor], steps: int = HILL_CLIMB_STEPS) -> MemoryPlan:
    """USMP's hill climb: start from the better greedy order, then try swapping two tensors
    in the order (a fixed pseudo-random sequence: plans are reproducible) and keep a swap
    that does not grow the arena; stops early at the lower bound."""
    import random

    bound = lower_bound(tensors)
    first = min((plan_arena(tensors), plan_by_conflicts(tensors)), key=lambda p: p.bytes)
    order = sorted(tensors, key=lambda t: (first.offsets[t.id], -t.nbytes, t.id))
    best_offsets, best = _place(order)
    rng = random.Random(0)
    for _ in range(steps if len(order) > 1 else 0):
        if best <= bound:
            break
        i, j = rng.sample(range(len(order)), 2)
        order[i], order[j] = order[j], order[i]
        offsets, size = _place(order)
        if size <= best:
            best_offsets, best = offsets, size
        else:
            order[i], order[j] = order[j], order[i]
    return MemoryPlan(best_offsets, best, method="hill-climb")


def _plan_from(order: list[Tensor], method: str) -> MemoryPlan:
    offsets, size = _place(order)
    return MemoryPlan(offsets, size, method=method)


def _finish(plan: MemoryPlan, tensors: list[Tensor]) -> None:
    """The figures every plan reports, whoever made it."""
    plan.naive = sum(_align(t.nbytes) for t in tensors)
    plan.lower_bound = lower_bound(tensors)
    plan.sizes = {t.id: _align(t.nbytes) for t in tensors}


Planner = Callable[[list[Tensor]], MemoryPlan]
PLANNERS: dict[str, Planner] = {
    "arena": plan_arena,
    "conflicts": plan_by_conflicts,
    "hill-climb": plan_hill_climb,
    "tokens": plan_tokens,
}


def register_memory_planner(name: str, planner: Planner) -> None:
    """Add a planner: `planner(tensors) -> MemoryPlan` (an offset for every tensor and
    `bytes`); `codegen.memory_planner` can then name it. Every plan is checked before use
    (no two live tensors may overlap), so a wrong planner fails the build, not a run."""
    if name in PLANNERS:
        raise ValueError(f"memory planner '{name}' is already registered")
    PLANNERS[name] = planner


def list_memory_planners() -> list[str]:
    return sorted(PLANNERS)


def make_plan(tensors: list[Tensor], method: str = "arena") -> MemoryPlan:
    if method not in PLANNERS:
        known = ", ".join(sorted(PLANNERS))
        raise CodegenError(f"unknown memory planner '{method}'; known: {known}")
    plan = PLANNERS[method](tensors)
    check_plan(plan, tensors, method)
    _finish(plan, tensors)
    return plan


def check_plan(plan: MemoryPlan, tensors: list[Tensor], method: str) -> None:
    """Every tensor placed, inside the arena, and no two live ones overlapping."""
    spans = []
    for t in tensors:
        if t.id not in plan.offsets:
            raise CodegenError(f"memory planner '{method}' left tensor {t.id} unplaced")
        start, end = plan.offsets[t.id], plan.offsets[t.id] + _align(t.nbytes)
        if start < 0 or end > plan.bytes:
            raise CodegenError(f"memory planner '{method}' put tensor {t.id} outside its arena")
        if end > start:
            spans.append((start, end, t))
    spans.sort(key=lambda s: s[0])
    for i, (_, end, t) in enumerate(spans):
        for other_start, _, o in spans[i + 1 :]:
            if other_start >= end:
                break
            if o.first <= t.last and t.first <= o.last:
                raise CodegenError(
                    f"memory planner '{method}' overlaps tensors {t.id} and {o.id} while both "
                    "are alive"
                )


def plan_pools(
    tensors: list[Tensor], method: str, pools: tuple[MemoryPool, ...]
) -> list[MemoryPlan]:
    """One plan per pool: each pool is planned with `method`; while its arena is over the
    pool's size, the largest tensor reaching past the limit spills to the next pool."""
    plans = []
    remaining = tensors
    for pool in pools:
        limit = pool.size
        kept = [t for t in remaining if limit is None or _align(t.nbytes) <= limit]
        spilled = [t for t in remaining if limit is not None and _align(t.nbytes) > limit]
        plan = make_plan(kept, method)
        while limit is not None and plan.bytes > limit:
            crossing = [t for t in kept if plan.offsets[t.id] + _align(t.nbytes) > limit]
            out = max(crossing or kept, key=lambda t: (t.nbytes, -t.id))
            kept = [t for t in kept if t is not out]
            spilled.append(out)
            plan = make_plan(kept, method)
        plans.append(plan)
        remaining = spilled
    if remaining:
        need = sum(_align(t.nbytes) for t in remaining)
        listed = ", ".join(map(str, pools))
        raise CodegenError(
            f"{len(remaining)} tensors ({need} bytes) do not fit in the memory pools {listed}; "
            "give the last pool no size (codegen.memory_pools) or a larger one"
        )
    return plans


def combine(
    per_device: list[list[MemoryPlan]],
    names: list[str],
    pools: tuple[MemoryPool, ...],
    bounds: list[int],
) -> MemoryPlan:
    """One plan of every device's pool plans (offsets stay relative to each arena); the
    lower bound is each device's, whatever the pools."""
    method = per_device[0][0].method if per_device and per_device[0] else "arena"
    out = MemoryPlan(method=method, arena_names=[], arena_device=[], device_names=names)
    for device, plans in enumerate(per_device):
        for pool, p in zip(pools, plans, strict=True):
            arena = len(out.arena_bytes)
            out.offsets.update(p.offsets)
            out.sizes.update(p.sizes)
            out.arena_of.update({tid: arena for tid in p.offsets if arena})
            out.arena_bytes.append(p.bytes)
            named = pools != DEFAULT_POOLS
            out.arena_names.append(f"{names[device]}/{pool.name}" if named else names[device])
            out.arena_device.append(device)
            out.bytes += p.bytes
            out.naive += p.naive
        out.lower_bound += bounds[device]
    return out


def scratch_id(node_id: int, k: int = 0) -> int:
    """The planned tensor id of a kernel's k-th scratch buffer (im2col columns, padded
    input, wide convolution rows): negative, so it never meets a node id."""
    return -1 - (node_id * MAX_SCRATCHES + k)


MAX_SCRATCHES = 4


def plan_graph(
    graph: Graph,
    devices: DevicePlan,
    method: str = "arena",
    pools: tuple[MemoryPool, ...] = DEFAULT_POOLS,
    shapes: Mapping[int, tuple[int, ...]] | None = None,
) -> MemoryPlan:
    """Lifetimes of the graph's kernel results (aliases extend their source's) and scratch
    buffers (alive during their kernel only), then a plan per device. `shapes`: node id
    -> the shape to plan for instead of the node's (a program for every size at sizes
    below its capacity, codegen/plan/every_size.py)."""
    shapes = shapes or {}
    nodes = graph.nodes
    outputs = {storage_root(nodes, nodes[o]).id for o in graph.outputs}
    last: dict[int, int] = {}
    for step, n in enumerate(nodes):
        for i in n.inputs:
            last[storage_root(nodes, nodes[i]).id] = step
            if isinstance(nodes[i], FieldNode):
                last[nodes[i].inputs[0]] = step
    per_device: list[list[Tensor]] = [[] for _ in devices.devices]
    for step, n in enumerate(nodes):
        if not isinstance(n, KernelNode) or n.kernel is None:
            continue
        tensors = per_device[devices.of(n.id)]
        for k, (shape, dtype) in enumerate(n.kernel.scratches):
            extents = tuple(d for d in shape if isinstance(d, int))
            assert len(extents) == len(shape), "a kernel with scratch is lowered per size"
            tensors.append(Tensor(scratch_id(n.id, k), nbytes(extents, dtype), step, step))
        if n.shape is None or n.id in outputs:
            continue
        size = nbytes(shapes.get(n.id, n.shape), n.dtype)  # type: ignore[arg-type]
        tensors.append(Tensor(n.id, size, step, max(last.get(n.id, step), step)))
    return combine(
        [plan_pools(t, method, pools) for t in per_device],
        devices.names,
        pools,
        [lower_bound(t) for t in per_device],
    )


def graph_storage_ids(graph: Graph, plan: MemoryPlan) -> dict[int, int]:
    """Each node's storage id: planned tensors share ids by place; inputs, constants and
    outputs, which the caller owns, get one id each after them, as in TVM's graph JSON."""
    nodes = graph.nodes
    storage = plan.storage_ids()
    own = max(storage.values(), default=-1) + 1
    out = {}
    for n in nodes:
        root = storage_root(nodes, n)
        if root.id not in storage and root.shape is not None:
            storage[root.id], own = own, own + 1
        out[n.id] = storage.get(root.id, -1)
    return out
