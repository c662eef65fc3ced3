"""Inline: global functions marked `Inline=1` replaced by their bodies at every call (TVM's
`relay.transform.Inline`), then dropped once nothing calls them.

External regions (`Compiler`) carry Inline=1 too but stay: their target compiles them. A
function that reaches itself through inlined calls is refused (inlining would not end).
"""

from __future__ import annotations

from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter

from egraph_ir.errors import PassError
from egraph_ir.expr import Function, GlobalVar
from egraph_ir.inline import inline_function
from egraph_ir.module import IRModule
from egraph_ir.visitor import post_order

from ..context import PassContext
from ..pass_base import ModulePass
from ..registry import register_pass
from ..run import PassReport, record


def _inlinable(name: str, fn: Function) -> bool:
    return name != "main" and bool(fn.attrs.get("Inline")) and not fn.attrs.get("Compiler")


def _callees(fn: Function) -> set[str]:
    return {e.name_hint for e in post_order(fn.body) if isinstance(e, GlobalVar)}


@register_pass
@dataclass(frozen=True)
class Inline(ModulePass):
    """Inline global functions marked Inline=1 (not external regions) at their calls."""

    opt_level = 1
    idempotent = True

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        functions = dict(mod.items())
        marked = {name: fn for name, fn in functions.items() if _inlinable(name, fn)}
        if not marked:
            return mod
        order = _callees_first(marked)
        done: dict[str, Function] = {}
        for name in order:  # a marked function's own marked callees are inlined first
            done[name] = inline_function(marked[name], functions=done)
        out = {
            name: inline_function(fn, functions=done)
            for name, fn in functions.items()
            if name not in marked
        }
        reached = set().union(*(_callees(fn) for fn in out.values()))
        out.update({name: fn for name, fn in marked.items() if name in reached})
        record(InlineReport(inlined=len(marked) - len(set(marked) & reached)))
        return IRModule(out)


def _callees_first(marked: dict[str, Function]) -> list[str]:
    """The marked functions, each after the marked functions it calls; a cycle is refused."""
    calls = {name: _callees(fn) & set(marked) for name, fn in marked.items()}
    try:
        return list(TopologicalSorter(calls).static_order())
    except CycleError as exc:
        raise PassError(f"Inline: @{exc.args[1][0]} reaches itself through inlined calls") from None


@dataclass(frozen=True, slots=True)
class InlineReport(PassReport):
    """Global functions inlined everywhere and dropped."""

    inlined: int
