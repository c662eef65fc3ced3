"""DeadCodeElimination: drop let bindings nobody reads and functions main cannot reach.

Every op is pure, so an unused binding can go. Removal repeats until nothing changes (one
dropped binding can make its value's variables unused in turn).
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_ir.expr import Expr, Function, GlobalVar, Let, Var, children
from egraph_ir.module import IRModule
from egraph_ir.visitor import ExprMutator, post_order

from ..context import PassContext
from ..pass_base import ModulePass
from ..registry import register_pass
from ..run import PassReport, record


def _used_vars(e: Expr) -> set[Var]:
    """Variables read somewhere in e (a binding site is not a read)."""
    used: set[Var] = set()
    for node in post_order(e):
        if isinstance(node, Let):
            reads: tuple[Expr, ...] = (node.value, node.body)
        elif isinstance(node, Function):
            reads = (node.body,)
        else:
            reads = children(node)
        used.update(c for c in reads if isinstance(c, Var))
    return used


class _DropUnusedLets(ExprMutator):
    def __init__(self, used: set[Var]) -> None:
        super().__init__()
        self.used = used
        self.dropped = 0

    def rewrite_let(self, pre: Let, post: Let) -> Expr:  # type: ignore[override]
        if pre.var not in self.used:
            self.dropped += 1
            return post.body
        return post


def eliminate_dead_lets(fn: Function, max_rounds: int = 100) -> tuple[Function, int]:
    total = 0
    for _ in range(max_rounds):
        mutator = _DropUnusedLets(_used_vars(fn))
        out = mutator.visit(fn)
        assert isinstance(out, Function)
        if mutator.dropped == 0:
            break
        total += mutator.dropped
        fn = out
    return fn, total


def reachable_functions(mod: IRModule, entry: str = "main") -> set[str]:
    seen = {entry}
    stack = [entry]
    while stack:
        for node in post_order(mod[stack.pop()]):
            if isinstance(node, GlobalVar) and node.name_hint not in seen and node.name_hint in mod:
                seen.add(node.name_hint)
                stack.append(node.name_hint)
    return seen


@register_pass
class DeadCodeElimination(ModulePass):
    """Remove unused let bindings and global functions unreachable from @main."""

    idempotent = True

    opt_level = 1

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        keep = reachable_functions(mod) if "main" in mod else set(mod)
        funcs = {}
        lets = 0
        for name, fn in mod.items():
            if name not in keep:
                continue
            new_fn, dropped = eliminate_dead_lets(fn)
            lets += dropped
            funcs[name] = new_fn
        record(DeadCodeReport(functions_removed=len(mod) - len(funcs), let_bindings_removed=lets))
        if len(funcs) == len(mod) and all(funcs[n] is mod[n] for n in funcs):
            return mod
        return IRModule(funcs)


@dataclass(frozen=True, slots=True)
class DeadCodeReport(PassReport):
    """Functions unreachable from main and let bindings nobody reads, removed."""

    functions_removed: int
    let_bindings_removed: int
