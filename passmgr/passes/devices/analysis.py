"""Which device every expression of a module is on: constraints, cuts and defaults.

1. **Constraints** (TVM's rules). `on_device(x, d)` puts x on d; with `constrain_result`
   its result too; an `on_device` immediately let-bound, or at the top of the body of a
   function whose result device is not given, is read as fixed (both), and of two nested
   ones only the outer counts. `device_copy`
   puts its argument on the source and its result on the destination. A let variable is
   where its value is; a let is where its body is; an `if` and both arms are on one device;
   a function's domain is `fn(params): result`, shared by every call (no polymorphism);
   parameters and results carry `virtual_device` attributes when a planner wrote them.
   Fused (`Primitive`) and external (`Compiler`) functions are not looked into: calling
   one is like calling an op.
2. **Operator edges are soft.** TVM also forces an op's arguments onto its result's device,
   and fails when annotations disagree. Here each argument of an op (and each tuple field,
   tuple projection and free `on_device`) is a soft edge: if its ends land on different
   devices the value is copied, once per value and destination device. Connected
   expressions with one known device all take it (TVM's answer); where two or more devices
   meet, the placement copying the fewest bytes is found exactly by an integer program
   (HiGHS; with two devices it is a minimum cut where a value's users share one copy).
3. **Defaults** (TVM's order) for what nothing constrains: a function's result takes the
   default device, its parameters the result's device, a let-bound value the let's device,
   and anything left the default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from egraph_ir.device import VirtualDevice
from egraph_ir.errors import PassError
from egraph_ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    op_name,
    short_repr,
)
from egraph_ir.module import IRModule
from egraph_ir.registry import Op
from egraph_ir.types import FuncType, Type, tensor_types
from egraph_ir.visitor import post_order

from .cut import SoftEdge, components, copy_groups, multiway_cut
from .domains import Domains
from .links import Links


def is_opaque_function(fn: object) -> bool:
    """A fused or external function: its body is not planned, calling it is like an op."""
    return isinstance(fn, Function) and bool(fn.attrs.get("Primitive") or fn.attrs.get("Compiler"))


def device_polymorphic(call: Call, mod: IRModule) -> bool:
    """A call of an op or of a fused/external function (directly or through its global):
    its arguments and result are soft edges, any device will do."""
    callee = call.op
    if isinstance(callee, GlobalVar) and callee.name_hint in mod:
        callee = mod[callee.name_hint]
    return isinstance(callee, Op) or is_opaque_function(callee)


def _type(e: Expr) -> Type | None:
    return getattr(e, "_checked_type", None) or (e.type_annotation if isinstance(e, Var) else None)


def _bytes(e: Expr) -> int:
    t = _type(e)
    return sum(x.nbytes for x in tensor_types(t)) if t is not None else 0


@dataclass
class DeviceAnalysis:
    """Domains for every expression of a module, and after `solve()` a device for each."""

    mod: IRModule
    default: VirtualDevice
    links: Links | None = None  # cost per byte of each device pair (None: 1 everywhere)
    domains: Domains = field(default_factory=Domains)
    dom: dict[Expr, int] = field(default_factory=dict)
    edges: list[SoftEdge] = field(default_factory=list)
    ignored: set[Expr] = field(default_factory=set)  # inner on_device of a nested pair
    fixed: set[Expr] = field(default_factory=set)  # on_device read as constrain_result=True
    free_results: list[SoftEdge] = field(default_factory=list)  # pinned body, free result
    order: dict[str, list[Expr]] = field(default_factory=dict)  # post-order per function
    assigned: dict[int, VirtualDevice] = field(default_factory=dict)  # leaf root -> device
    copied_bytes: int = 0  # copies the cut chose (once per value and destination)
    members: dict[int, list[int]] = field(default_factory=dict)  # soft-connected components
    component: dict[int, int] = field(default_factory=dict)  # leaf root -> its component

    # ------------------------------------------------------------ 1. constraints
    def constrain(self) -> None:
        d = self.domains
        for name, fn in self.mod.items():
            if is_opaque_function(fn):
                continue
            self.dom[GlobalVar(name)] = d.function(
                [self._var(p) for p in fn.params], d.for_type(fn.ret_type or _ret(fn))
            )
        for name, fn in self.mod.items():
            if is_opaque_function(fn):
                continue
            nodes = list(post_order(fn, stop=is_opaque_function))
            self.order[name] = nodes
            self._mark_on_device_forms(nodes)
            for e in nodes:
                self._visit(e, GlobalVar(name) if e is fn else None)

    def _var(self, v: Var) -> int:
        if v not in self.dom:
            self.dom[v] = self.domains.for_type(_type(v))
        return self.dom[v]

    def _mark_on_device_forms(self, nodes: list[Expr]) -> None:
        """Phase 0 of TVM's planner, as sets instead of a rewrite."""
        for e in nodes:
            top = e.value if isinstance(e, Let) else None
            if isinstance(e, Function) and "virtual_device" not in e.attrs:
                top = e.body  # a result device given by the user wins (a copy may follow)
            if (
                isinstance(top, Call)
                and op_name(top) == "on_device"
                and top.attrs["constrain_body"]
            ):
                self.fixed.add(top)
            if (
                isinstance(e, Call)
                and op_name(e) == "on_device"
                and op_name(e.args[0]) == "on_device"
            ):
                self.ignored.add(e.args[0])

    def _visit(self, e: Expr, global_name: GlobalVar | None) -> None:
        d = self.domains
        where = short_repr(e)
        match e:
            case Var():
                self._var(e)
            case GlobalVar():
                if e not in self.dom:  # an external function: like an op
                    self.dom[e] = d.for_type(_type(e))
            case Constant():
                self.dom[e] = d.leaf()
            case Function() if is_opaque_function(e):
                self.dom[e] = d.for_type(_type(e))
            case Function():
                result = self._result_domain(e)
                if global_name is not None:
                    fn_dom = self.dom[global_name]
                    where = f"the result of @{global_name.name_hint}"
                    d.unify(d.fn_parts[fn_dom][1], result, where)
                else:
                    fn_dom = d.function([self._var(p) for p in e.params], result)
                self.dom[e] = fn_dom
                self._pin_function(e, fn_dom)
            case Call():
                self._visit_call(e, where)
            case Tuple():
                self.dom[e] = t = d.leaf()
                for f in e.fields:
                    self._flow(f, t, where)
            case TupleGetItem():
                if isinstance(_type(e), FuncType):
                    self.dom[e] = d.for_type(_type(e))
                    d.unify(self.dom[e], self.dom[e.tuple_value], where)
                else:
                    self.dom[e] = d.leaf()
                    self._soft(self.dom[e.tuple_value], self.dom[e], e)
            case Let():
                d.unify(self._var(e.var), self.dom[e.value], f"let %{e.var.name_hint}")
                self.dom[e] = self.dom[e.body]
            case If():
                self.dom[e] = self.dom[e.true_branch]
                d.unify(self.dom[e], self.dom[e.false_branch], "the two branches of an if")
                d.unify(self.dom[e.cond], d.result_leaf(self.dom[e]), "the condition of an if")
            case _:
                raise PassError(f"PlanDevices: cannot plan {type(e).__name__} nodes")

    def _result_domain(self, fn: Function) -> int:
        """Where a function returns its value. A tensor result may be copied after the body
        (its last op computed where its inputs are, only the result moving: sum(exp(x))
        moves 4 KiB, not x's 4 MiB), so it is a soft edge from the body; a tuple already
        moves field by field, and a function value is where its devices are."""
        body = self.dom[fn.body]
        if self.domains.is_function(body) or isinstance(fn.body, Tuple):
            return body
        result = self.domains.leaf()
        self.edges.append(SoftEdge(body, result, _bytes(fn.body), False, fn.body, late=True))
        return result

    def _pin_function(self, fn: Function, fn_dom: int) -> None:
        d = self.domains
        params, result = d.fn_parts[d.find(fn_dom)]
        where = f"the result of {short_repr(fn)}"
        if isinstance(fn.attrs.get("virtual_device"), VirtualDevice):
            d.pin(d.result_leaf(result), fn.attrs["virtual_device"], where)
        given = fn.attrs.get("param_virtual_devices") or ()
        for p, dom, vd in zip(fn.params, params, given, strict=False):
            if isinstance(vd, VirtualDevice):
                d.pin(d.result_leaf(dom), vd, f"parameter %{p.name_hint}")

    def _visit_call(self, e: Call, where: str) -> None:
        d = self.domains
        name = op_name(e)
        if name == "on_device":
            body = self.dom[e.args[0]]
            if e in self.ignored:
                self.dom[e] = body
                return
            vd = e.attrs["virtual_device"]
            body_pinned = bool(e.attrs["constrain_body"])
            result_pinned = bool(e.attrs["constrain_result"]) or e in self.fixed
            self.dom[e] = d.for_type(_type(e))
            if body_pinned:
                d.pin(body, vd, short_repr(e.args[0]))
            if result_pinned:
                d.pin(self.dom[e], vd, where)
            if body_pinned and result_pinned:
                d.unify(body, self.dom[e], where)
            elif not body_pinned:  # free or result-only: a copy may go here if needed
                self._soft(body, self.dom[e], e.args[0], annotation=True)
            else:  # a pinned body, its result free: see _connect_free_results
                self.free_results.append(SoftEdge(body, self.dom[e], _bytes(e), True, e.args[0]))
            return
        if name == "device_copy":
            d.pin(self.dom[e.args[0]], e.attrs["src_virtual_device"], short_repr(e.args[0]))
            self.dom[e] = d.leaf(e.attrs["dst_virtual_device"])
            return
        if device_polymorphic(e, self.mod):
            self.dom[e] = out = d.leaf()
            declared = self._declared_device(e)
            if declared is not None:  # a fused or external function that says where it runs
                d.pin(out, declared, where)
            for a in e.args:
                self._flow(a, out, where)
            return
        assert isinstance(e.op, Expr)
        self.dom[e] = d.for_type(_type(e))
        call_dom = d.function([self.dom[a] for a in e.args], self.dom[e])
        d.unify(self.dom[e.op], call_dom, where)

    def _declared_device(self, call: Call) -> VirtualDevice | None:
        """The device a called fused/external function declares (`virtual_device`, or
        its parameters' one device): its kernel runs there, its operands are copied in."""
        callee = call.op
        if isinstance(callee, GlobalVar) and callee.name_hint in self.mod:
            callee = self.mod[callee.name_hint]
        if not isinstance(callee, Function):
            return None
        given = callee.attrs.get("virtual_device")
        if isinstance(given, VirtualDevice):
            return given
        params = set(callee.attrs.get("param_virtual_devices") or ())
        only = params.pop() if len(params) == 1 else None
        return only if isinstance(only, VirtualDevice) else None

    def _flow(self, value: Expr, into: int, where: str) -> None:
        """A value used by an op or held in a tuple: a soft edge, or for a function value,
        all its devices become the holder's."""
        if self.domains.is_function(self.dom[value]):
            self.domains.unify(self.dom[value], into, where)
        else:
            self._soft(self.dom[value], into, value)

    def _soft(self, src: int, dst: int, value: Expr, annotation: bool = False) -> None:
        self.edges.append(SoftEdge(src, dst, _bytes(value), annotation, value))

    # ------------------------------------------------------------ 2.-3. solving
    def _connect_free_results(self) -> None:
        """A value pinned to a device with its result left free (`on_device(%x, cpu0)`):
        where anything its users connect to is pinned, the value flows on to them so the
        cut places every copy (the row sums' 4 KiB move, not x's 4 MiB; an add computed
        beside its pinned operand and its result moved, not both operands), as a
        parameter given by param_virtual_devices does. Where nothing pins the users,
        they stay on the default device and the copy at the annotation, as TVM plans it."""
        d = self.domains
        component = components([(d.find(e.src), d.find(e.dst)) for e in self.edges])
        pins: dict[int, set[VirtualDevice]] = {}
        for root, key in component.items():
            if (device := d.device[root]) is not None:
                pins.setdefault(key, set()).add(device)
        for edge in self.free_results:
            result = d.find(edge.dst)
            if pins.get(component.get(result, result)):
                self.edges.append(edge)

    def solve(self) -> None:
        self._connect_free_results()
        d = self.domains
        adjacency: dict[int, list[int]] = {}
        edges = []
        for edge in self.edges:
            a, b = d.find(edge.src), d.find(edge.dst)
            if a != b:
                edges.append((a, b, edge))
                adjacency.setdefault(a, []).append(b)
                adjacency.setdefault(b, []).append(a)
        component, members = self.component, self.members
        for start in adjacency:
            if start in component:
                continue
            component[start] = start
            members[start] = [start]
            stack = [start]
            while stack:
                for nxt in adjacency[stack.pop()]:
                    if nxt not in component:
                        component[nxt] = start
                        members[start].append(nxt)
                        stack.append(nxt)
        comp_edges: dict[int, list[tuple[int, int, SoftEdge]]] = {}
        for a, b, edge in edges:
            comp_edges.setdefault(component[a], []).append((a, b, edge))
        for key, roots in members.items():
            pins = {r: vd for r in roots if (vd := d.device[r]) is not None}
            devices = sorted(set(pins.values()), key=str)
            if len(devices) == 1:
                self.assigned.update(dict.fromkeys(roots, devices[0]))
            elif len(devices) > 1:
                groups = copy_groups(comp_edges.get(key, []))
                placed = multiway_cut(roots, pins, groups, devices, self.links)
                self.assigned.update(placed)
                self.copied_bytes += sum(g.bytes * len(g.destinations(placed)) for g in groups)
        self._apply_defaults()

    def _settle(self, d_: int, device: VirtualDevice) -> VirtualDevice:
        """The device of a leaf, giving its whole (unpinned) component `device` if unset."""
        root = self.domains.find(d_)
        if root in self.assigned:
            return self.assigned[root]
        if self.domains.device[root] is not None:
            self.assigned[root] = self.domains.device[root]  # type: ignore[assignment]
            return self.assigned[root]
        group = self.members.get(self.component.get(root, -1), [root])
        for r in group:
            self.assigned.setdefault(r, device)
        self.assigned.setdefault(root, device)
        return self.assigned[root]

    def _apply_defaults(self) -> None:
        d = self.domains
        for nodes in self.order.values():
            for e in reversed(nodes):  # parents before children
                if isinstance(e, Function) and not is_opaque_function(e):
                    params, result = d.fn_parts[d.find(self.dom[e])]
                    where = self._settle(d.result_leaf(result), self.default)
                    for p in params:
                        for leaf in d.leaves(p):
                            self._settle(leaf, where)
                elif isinstance(e, Let):
                    here = self._settle(d.result_leaf(self.dom[e]), self.default)
                    for leaf in d.leaves(self.dom[e.value]):
                        self._settle(leaf, here)
        for dom in self.dom.values():
            for leaf in d.leaves(dom):
                self._settle(leaf, self.default)

    # ------------------------------------------------------------ results
    def device(self, e: Expr) -> VirtualDevice:
        """The device holding e's value (for a function, where its result lives)."""
        return self._leaf_device(self.domains.result_leaf(self.dom[e]))

    def function_devices(self, fn: Function) -> tuple[VirtualDevice, list[VirtualDevice]]:
        """Where a function's result and each of its parameters live."""
        d = self.domains
        params, result = d.fn_parts[d.find(self.dom[fn])]
        leaf = self._leaf_device
        return leaf(d.result_leaf(result)), [leaf(d.result_leaf(p)) for p in params]

    def _leaf_device(self, leaf: int) -> VirtualDevice:
        return self.assigned.get(leaf) or self._settle(leaf, self.default)


def _ret(fn: Function) -> Type | None:
    t = _type(fn)
    return t.ret if isinstance(t, FuncType) else None
