"""Device bookkeeping at run time: copy traffic, and the device sanitizer.

Each device owns memory: its arena, the constants placed on it (a constant used on two
devices has a copy on each), and the inputs and outputs bound to it. With config
`codegen.check_devices` on, every run first checks, from the slot table the native code is
about to read, that each buffer of each kernel lies in memory of the kernel's device (a
copy reads its source device and writes its destination), and fails naming the kernel, its
ops and both devices when one does not. Buffers of tuple fields produced by host kernels
are filled during the run and not checked.
"""

from __future__ import annotations

import bisect
from typing import Any, Protocol

import numpy as np

from egraph_ir.errors import CodegenError

from ..llvm.entries import RepeatCall
from ..plan.devices import DevicePlan
from ..plan.graph import FieldNode, Graph, KernelNode, Node
from ..plan.link import Program
from ..plan.memory import nbytes


class RunState(Protocol):
    """What the sanitizer reads of a runtime (codegen/runtime/runner.py) about to run."""

    graph: Graph
    program: Program
    slots: np.ndarray
    bases: list[int]
    fresh: list[Node]


def copy_traffic(graph: Graph, devices: DevicePlan) -> dict[tuple[str, str], tuple[int, int]]:
    """Copies per run: (source, destination) device names -> (count, bytes)."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    names = devices.names
    for n in graph.nodes:
        if devices.source_of(n.id) < 0 or n.shape is None:
            continue
        key = (names[devices.source_of(n.id)], names[devices.of(n.id)])
        count, moved = out.get(key, (0, 0))
        out[key] = (count + 1, moved + nbytes(n.shape, n.dtype))  # type: ignore[arg-type]
    return out


class _Owners:
    """Address ranges and the device owning each (allocations do not overlap)."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int, int]] = []
        self.starts: list[int] = []

    def add(self, start: int, size: int, device: int) -> None:
        self.ranges.append((start, start + size, device))

    def owner(self, address: int) -> int | None:
        if len(self.starts) != len(self.ranges):
            self.ranges.sort()
            self.starts = [r[0] for r in self.ranges]
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address <= self.ranges[i][1]:
            return self.ranges[i][2]
        return None


def check_devices(rt: RunState, env: dict[int, Any]) -> None:
    """Raise CodegenError when a kernel's buffer is not in its device's memory."""
    program, graph = rt.program, rt.graph
    devices = program.devices
    owners = _Owners()
    plan = program.plan
    sizes = plan.arena_bytes or [plan.bytes]
    for arena, (base, size) in enumerate(zip(rt.bases, sizes, strict=True)):
        owners.add(base, size, plan.arena_device[arena])
    for slot, array in program.constants:
        owners.add(array.ctypes.data, array.nbytes, program.slot_device.get(slot, 0))
    for n in [*graph.inputs, *rt.fresh]:
        value = env[n.id]
        owners.add(value.ctypes.data, value.nbytes, devices.of(n.id))
    field_slots = {program.slot_of[n.id] for n in graph.nodes if isinstance(n, FieldNode)}
    for node_id, calls in program.calls.items():
        n = graph.nodes[node_id]
        out = program.slot_of.get(node_id)
        for call in calls:
            inner = call.calls if isinstance(call, RepeatCall) else [call]
            for slot in (s for c in inner for s in c.slots):
                if slot in field_slots:
                    continue
                source = devices.source_of(n.id)
                wanted = devices.of(n.id) if slot == out or source < 0 else source
                found = owners.owner(int(rt.slots[slot]))
                if found != wanted:
                    names = devices.names
                    where = "no device's memory" if found is None else names[found]
                    ops = ", ".join(n.ops) if isinstance(n, KernelNode) else n.op
                    raise CodegenError(
                        f"device check: kernel {n.name} ({ops}) runs on "
                        f"{names[wanted]} but a buffer it uses lies in {where}"
                    )
