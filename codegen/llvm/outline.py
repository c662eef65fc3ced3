"""Loops emitted as functions of their own (`For.outline`): what such a function needs.

Why: an epilogue's math (the exponential of a sigmoid needs about fourteen constants) in
the same function as a product's register block lets LLVM keep those constants in
registers across the whole function. With AVX2's sixteen vector registers the product
loop then spilled its accumulators to the stack on every step (EfficientNet-B0's 16 -> 96
pointwise layer with its SiLU: 2.0 ms, 0.6 ms without the SiLU). In a function of its own
the epilogue loads its constants per call, and the product loop keeps its registers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..loop_ir import Assign, Declare, For, LExpr, LoopVar, Ref, Stmt, Store, operands


@dataclass(frozen=True)
class FreeNames:
    """The loop variables and locals a loop reads but does not define, in first-use order:
    the extra arguments of its function."""

    loop_vars: tuple[str, ...]
    locals: tuple[str, ...]


def free_names(loop: For) -> FreeNames:
    """Walks the loop (statements and expressions by worklists: expression trees of long
    fused chains are deep). An outlined loop may read the locals around it, never assign
    them: its function gets their values, not their storage."""
    bound_vars, declared = {loop.var}, set()
    loop_vars: dict[str, None] = {}
    refs: dict[str, None] = {}
    exprs: list[LExpr] = [] if loop.stop is None else [loop.stop]
    stmts: list[Stmt] = list(reversed(loop.body))
    while stmts:
        s = stmts.pop()
        if isinstance(s, For):
            bound_vars.add(s.var)
            stmts += reversed(s.body)
            exprs += [] if s.stop is None else [s.stop]
        elif isinstance(s, Store):
            exprs += [s.index, s.value]
        elif isinstance(s, Declare):
            declared.add(s.name)
            exprs.append(s.init)
        elif isinstance(s, Assign):
            if s.name not in declared:
                caller = f"{s.name}, a local of its caller"
                raise ValueError(f"an outlined loop over {loop.var} assigns {caller}")
            exprs.append(s.value)
    seen: set[int] = set()
    while exprs:
        e = exprs.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, LoopVar) and e.name not in bound_vars:
            loop_vars[e.name] = None
        elif isinstance(e, Ref) and e.name not in declared:
            refs[e.name] = None
        exprs += operands(e)
    return FreeNames(tuple(loop_vars), tuple(refs))
