"""PlanDevices: give every sub-expression a device and make the moves explicit.

The analysis (analysis.py) finds each expression's device; this pass writes the answer
back in TVM's form, so downstream passes and the back end read it lexically:

- `virtual_device` (result) and `param_virtual_devices` on every function;
- a `device_copy(on_device(v, src, fixed), src, dst)` wherever a value is used on another
  device than the one holding it: one copy per value and destination (TVM copies once per
  annotated use), so two users of one value on the same device share the copy;
- a fixed `on_device` around every let-bound value (variables and functions excepted);
- every other `on_device` dropped (its information now lives in the above).

Planning a planned module changes nothing (the fixed forms pin what was decided). Primitive
(fused) and external functions are kept as they are.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from egraph_ir.attrs import Attrs
from egraph_ir.device import VirtualDevice, as_device
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
)
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.op.device import DEVICE_COPY, ON_DEVICE
from egraph_ir.types import FuncType
from egraph_ir.visitor import post_order, rebuild

from ...config import register_config
from ...context import PassContext
from ...pass_base import ModulePass
from ...registry import register_pass
from ...run import PassReport, record
from .analysis import DeviceAnalysis, device_polymorphic, is_opaque_function, op_name
from .links import Links

register_config("devices.default", str, "cpu:0", "device of what nothing constrains (PlanDevices)")
register_config(
    "devices.link_costs",
    dict,
    {},
    'cost per byte of a copy per device pair, {"cpu:0->cpu:1": 0.5}; copies take the cheapest '
    "route (PlanDevices)",
    validate=lambda value: Links.of(value),
)


def project_first(mod: IRModule) -> IRModule:
    """`on_device(t, d).i` read as `on_device(t.i, d)` (TVM's phase 0): a copy then moves
    the projected field, not the whole tuple."""
    funcs: dict[str, Function] = {}
    for name, fn in mod.items():
        if is_opaque_function(fn):
            funcs[name] = fn
            continue
        memo: dict[Expr, Expr] = {}
        for e in post_order(fn, stop=is_opaque_function):
            t = memo.get(e.tuple_value) if isinstance(e, TupleGetItem) else None
            if (
                t is not None
                and op_name(t) == "on_device"
                and t.attrs["constrain_body"]  # type: ignore[attr-defined]
                and not t.attrs["constrain_result"]  # type: ignore[attr-defined]
            ):
                item = TupleGetItem(t.args[0], e.index, e.span)  # type: ignore[attr-defined]
                memo[e] = Call(ON_DEVICE, (item,), t.attrs)  # type: ignore[attr-defined]
            elif isinstance(e, Var | GlobalVar | Constant) or is_opaque_function(e):
                memo[e] = e
            else:
                memo[e] = rebuild(e, memo)
        out = memo[fn]
        assert isinstance(out, Function)
        funcs[name] = out
    return IRModule(funcs)


def analyse(
    mod: IRModule, default: VirtualDevice | str | None = None, links: Links | None = None
) -> DeviceAnalysis:
    """Constrain and solve: the device of every expression of `mod` (typed)."""
    if default is None:
        default = str(PassContext.current().get_config("devices.default"))
    analysis = DeviceAnalysis(mod, as_device(default), links)
    analysis.constrain()
    analysis.solve()
    return analysis


def device_map(
    mod: IRModule, default: VirtualDevice | str | None = None
) -> dict[Expr, VirtualDevice]:
    """Every expression of a (planned) module and the device holding its value; functions
    map to their result's device. The way to read devices after PlanDevices."""
    analysis = analyse(infer_type(mod), default)
    return {e: analysis.device(e) for e in analysis.dom if not isinstance(e, GlobalVar)}


def fixed(value: Expr, device: VirtualDevice) -> Expr:
    """`value` marked as computed and kept on `device` (variables need no mark)."""
    if isinstance(value, Var | GlobalVar | Function):
        return value
    return Call(ON_DEVICE, (value,), Attrs(virtual_device=device, constrain_result=True))


class _Rewriter:
    def __init__(self, analysis: DeviceAnalysis) -> None:
        self.a = analysis
        self.copies: dict[tuple[Expr, VirtualDevice], Expr] = {}
        self.count = 0

    def copy(self, value: Expr, src: VirtualDevice, dst: VirtualDevice) -> Expr:
        """`value` moved from src to dst: one device_copy per hop of the cheapest route
        (link costs), shared by every user on dst."""
        if src == dst:
            return value
        key = (value, dst)
        if key not in self.copies:
            hops = self.a.links.route(src, dst)[1] if self.a.links else [src, dst]
            moved = value
            for a, b in itertools.pairwise(hops):
                attrs = Attrs(src_virtual_device=a, dst_virtual_device=b)
                moved = Call(DEVICE_COPY, (fixed(moved, a),), attrs)
                self.count += 1
            self.copies[key] = moved
        return self.copies[key]

    def moved(self, value: Expr, new: Expr, dst: VirtualDevice) -> Expr:
        """`new` (the rewritten `value`) made available on dst."""
        if isinstance(getattr(value, "_checked_type", None), FuncType):
            return new
        return self.copy(new, self.a.device(value), dst)

    def function(self, fn: Function) -> Function:
        memo: dict[Expr, Expr] = {}
        nodes = post_order(fn, stop=is_opaque_function)
        for e in nodes:
            memo[e] = self.node(e, memo)
        out = memo[fn]
        assert isinstance(out, Function)
        return out

    def node(self, e: Expr, memo: dict[Expr, Expr]) -> Expr:
        a = self.a
        match e:
            case Var() | GlobalVar() | Constant():
                return e
            case Function() if is_opaque_function(e):
                return e
            case Function():
                result, params = a.function_devices(e)
                attrs = e.attrs.with_(virtual_device=result, param_virtual_devices=tuple(params))
                body = memo[e.body]
                if not isinstance(e.body, Tuple):  # the result may move after the body
                    body = self.moved(e.body, body, result)
                return Function(e.params, body, e.ret_type, attrs, e.span)
            case Call() if op_name(e) == "on_device":
                body = memo[e.args[0]]
                if e in a.ignored:
                    return body
                return self.moved(e.args[0], body, a.device(e))
            case Call() if op_name(e) == "device_copy":
                src, dst = e.attrs["src_virtual_device"], e.attrs["dst_virtual_device"]
                return self.copy(memo[e.args[0]], src, dst)
            case Call() if device_polymorphic(e, a.mod):
                here = a.device(e)
                args = tuple(self.moved(x, memo[x], here) for x in e.args)
                callee = memo[e.op] if isinstance(e.op, Expr) else e.op
                return Call(callee, args, e.attrs, e.span)  # type: ignore[arg-type]
            case Tuple():
                here = a.device(e)
                return Tuple(tuple(self.moved(f, memo[f], here) for f in e.fields), e.span)
            case TupleGetItem():
                item = TupleGetItem(memo[e.tuple_value], e.index, e.span)
                if isinstance(getattr(e, "_checked_type", None), FuncType):
                    return item
                return self.copy(item, a.device(e.tuple_value), a.device(e))
            case Let():
                value = fixed(memo[e.value], a.device(e.value))
                return Let(e.var, value, memo[e.body], e.span)
            case Call() | If():
                return rebuild(e, memo)
        raise AssertionError(type(e).__name__)


@register_pass
@dataclass(frozen=True)
class PlanDevices(ModulePass):
    """Give every expression a device (`default=` or config `devices.default` for what
    nothing constrains) and insert `device_copy` where values cross devices; see
    passmgr/passes/devices/analysis.py for the rules and the byte-minimising cut. With
    `links` (or config `devices.link_costs`) copies cost per byte per device pair and take
    the cheapest route, one device_copy per hop (links.py)."""

    default: VirtualDevice | str | None = None
    links: Mapping[Any, float] | Links | None = None  # {(src, dst): cost per byte}
    opt_level = 0
    idempotent = True

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        given = self.default if self.default is not None else ctx.get_config("devices.default")
        links = Links.of(
            self.links if self.links is not None else ctx.get_config("devices.link_costs")
        )
        typed = infer_type(project_first(infer_type(mod)))
        analysis = analyse(typed, as_device(given), links)
        rewriter = _Rewriter(analysis)
        funcs = {}
        for name, fn in typed.items():
            funcs[name] = fn if is_opaque_function(fn) else rewriter.function(fn)
        record(DevicePlanReport(copies=rewriter.count, bytes_on_cut_edges=analysis.copied_bytes))
        return infer_type(IRModule(funcs))


@dataclass(frozen=True, slots=True)
class DevicePlanReport(PassReport):
    """Copies PlanDevices inserted, and the bytes they move per run."""

    copies: int
    bytes_on_cut_edges: int


__all__ = ["DevicePlanReport", "PlanDevices", "analyse", "device_map", "fixed"]
