"""Devices in the back end: plan, find each graph node's device, check they can run.

`build` plans devices (passmgr's PlanDevices) when the optimised module mentions any
(`on_device`, `device_copy` or `virtual_device` attributes), then drops the `on_device`
marks: after planning every crossing is an explicit `device_copy`, which fusion keeps as a
kernel of its own, so a graph node's device follows from the graph itself: inputs from
main's parameter devices, a copy's result from its destination, every other kernel from its
(non-constant) inputs, or, for kernels of constants only, from their users. Devices of type
`cpu` run on the host, each with its own arena; other types are refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import passmgr as pm
from egraph_ir.device import VirtualDevice, as_device
from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Expr, Function, GlobalVar, Var
from egraph_ir.inline import inline_calls, inline_lets
from egraph_ir.module import IRModule
from egraph_ir.op.device import DEVICE_OPS
from egraph_ir.registry import Op
from egraph_ir.visitor import post_order, rebuild
from passmgr.passes.devices.analysis import is_opaque_function

from .graph import AliasNode, Graph, InputNode, KernelNode, ParamNode, storage_root

HOST_DEVICE_TYPES = ("cpu",)


def mentions_devices(mod: IRModule) -> bool:
    """Whether main carries device annotations or planned devices."""
    fn = mod["main"]
    if "virtual_device" in fn.attrs or "param_virtual_devices" in fn.attrs:
        return True
    return any(
        isinstance(e, Call) and isinstance(e.op, Op) and e.op.name in DEVICE_OPS
        for e in post_order(fn.body, into_functions=False)
    )


def plan_devices(mod: IRModule) -> IRModule:
    """PlanDevices, then main as dataflow for the graph executor: without its on_device
    marks (the copies stay), with let-bound values and functions substituted and calls of
    function literals and global functions inlined (the planner already put each callee's
    parameters where its call sites are)."""
    planned = pm.passes.PlanDevices()(mod)
    fn = planned["main"]
    callees = {n: f for n, f in planned.items() if n != "main" and not is_opaque_function(f)}
    body = fn.body
    for _ in range(MAX_INLINE_ROUNDS):  # a recursive global stops here, then fails to lower
        new = inline_calls(_dataflow(body), functions=callees)
        if new is body:
            break
        body = new
    main = Function(fn.params, body, fn.ret_type, fn.attrs, fn.span)
    return pm.passes.InferType()(planned.with_function("main", main))


MAX_INLINE_ROUNDS = 8


def _dataflow(expr: Expr) -> Expr:
    """expr without on_device marks and lets (values and functions substituted)."""
    expr = inline_lets(expr, functions_too=True)
    memo: dict[Expr, Expr] = {}
    for e in post_order(expr, stop=lambda e: isinstance(e, Function)):
        if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == "on_device":
            memo[e] = memo[e.args[0]]
        elif isinstance(e, Function | Var | GlobalVar | Constant):
            memo[e] = e
        else:
            memo[e] = rebuild(e, memo)
    return memo[expr]


def main_devices(fn: Function) -> tuple[VirtualDevice, list[VirtualDevice]]:
    """main's result device and its parameters' (the config default where unplanned)."""
    default = as_device(str(pm.PassContext.current().get_config("devices.default")))
    result = fn.attrs.get("virtual_device") or default
    params = list(fn.attrs.get("param_virtual_devices") or ())
    params += [result] * (len(fn.params) - len(params))
    return result, params


@dataclass(frozen=True)
class DevicePlan:
    """Where each graph node's value lives (its kernel runs there), by node id, as an index
    into `devices`; and each copy's source device."""

    devices: tuple[VirtualDevice, ...] = (VirtualDevice("cpu"),)
    device: tuple[int, ...] = ()
    source: dict[int, int] = field(default_factory=dict)  # copy node id -> source device

    @staticmethod
    def host(graph: Graph) -> DevicePlan:
        """Everything on the host's one device."""
        return DevicePlan(device=(0,) * len(graph.nodes))

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def of(self, node_id: int) -> int:
        return self.device[node_id]

    def source_of(self, node_id: int) -> int:
        """A copy's source device; -1 for every other node."""
        return self.source.get(node_id, -1)


def assign_devices(graph: Graph, fn: Function) -> DevicePlan:
    """Every node's device (and each copy's source device), from main's devices."""
    result, params = main_devices(fn)
    devices: list[VirtualDevice] = [result]

    def index(vd: VirtualDevice) -> int:
        if vd not in devices:
            devices.append(vd)
        return devices.index(vd)

    nodes = graph.nodes
    known: dict[int, int] = {}
    source: dict[int, int] = {}
    for node, vd in zip(graph.inputs, params, strict=True):
        known[node.id] = index(vd)
    for node_id, (src, dst) in graph.copies.items():
        source[node_id] = index(src)
        known[node_id] = index(dst)
    for n in nodes:  # forward: a kernel runs where its inputs are
        if n.id in known or isinstance(n, InputNode | ParamNode):
            continue
        sources = {known[i] for i in n.inputs if i in known}
        if len(sources) > 1:
            names = ", ".join(str(devices[s]) for s in sorted(sources))
            what = ", ".join(n.ops) if isinstance(n, KernelNode) and n.ops else n.op
            raise CodegenError(
                f"{n.name} ({what}) reads values on different devices "
                f"({names}) without a device_copy; run PlanDevices on the module"
            )
        if sources:
            known[n.id] = sources.pop()
    users: dict[int, list[int]] = {}
    for n in nodes:
        for i in n.inputs:
            users.setdefault(i, []).append(n.id)
    for o in graph.outputs:
        users.setdefault(o, []).append(-1)
    for n in reversed(nodes):  # backward: constants-only kernels run where they are used
        if n.id in known:
            continue
        wanted = [
            (source.get(u, known.get(u, 0)) if u >= 0 else 0) for u in users.get(n.id, [])
        ]  # a user needs its input where it reads: a copy's source, else its own device
        known[n.id] = wanted[0] if wanted else 0
    device = [known.get(n.id, 0) for n in nodes]
    for n in nodes:
        if isinstance(n, AliasNode):
            device[n.id] = known.get(storage_root(nodes, n).id, device[n.id])
    check_runnable(devices)
    return DevicePlan(tuple(devices), tuple(device), source)


def check_runnable(devices: Sequence[VirtualDevice]) -> None:
    for vd in devices:
        if vd.device_type not in HOST_DEVICE_TYPES:
            raise CodegenError(
                f"cannot run on device {vd}: this build runs only devices of type "
                f"{', '.join(HOST_DEVICE_TYPES)} (the host, any id and memory scope); "
                f"plan the module for those, or build where '{vd.device_type}' exists"
            )


__all__ = [
    "DevicePlan",
    "assign_devices",
    "check_runnable",
    "main_devices",
    "mentions_devices",
    "plan_devices",
]
