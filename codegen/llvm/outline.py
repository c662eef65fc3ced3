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

from ..loop_ir import Assign, Declare, For, LoopVar, Ref, walk


@dataclass(frozen=True)
class FreeNames:
    """The loop variables and locals a loop reads but does not define (each once): the
    extra arguments of its function, in this order."""

    loop_vars: tuple[str, ...]
    locals: tuple[str, ...]


def free_names(loop: For) -> FreeNames:
    """The names the loop reads and does not bind (loop_ir.walk). An outlined loop may read
    the locals around it, never assign them: its function gets their values, not their
    storage."""
    stmts, exprs = walk([loop])
    bound_vars = {s.var for s in stmts if isinstance(s, For)}
    declared = {s.name for s in stmts if isinstance(s, Declare)}
    for s in stmts:
        if isinstance(s, Assign) and s.name not in declared:
            caller = f"{s.name}, a local of its caller"
            raise ValueError(f"an outlined loop over {loop.var} assigns {caller}")
    loop_vars = [e.name for e in exprs if isinstance(e, LoopVar) and e.name not in bound_vars]
    refs = [e.name for e in exprs if isinstance(e, Ref) and e.name not in declared]
    return FreeNames(tuple(dict.fromkeys(loop_vars)), tuple(dict.fromkeys(refs)))
