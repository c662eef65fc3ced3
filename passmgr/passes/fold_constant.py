"""FoldConstant: evaluate calls whose inputs are all constants, with the numpy references.

Done on the IR directly (not in the e-graph) so large weights fold without being copied into
egglog; shared sub-expressions are evaluated once. Results above max_bytes stay unfolded.
As in TVM, a let bound to a constant is inlined and an if on a constant condition becomes
the branch it takes.
"""

from __future__ import annotations

from dataclasses import dataclass

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
from egraph_ir.fold import as_constant, constant_value, fold
from egraph_ir.module import IRModule
from egraph_ir.visitor import post_order, rebuild

from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record

DEFAULT_MAX_BYTES = 64 << 20


def fold_constants(fn: Function, max_bytes: int = DEFAULT_MAX_BYTES) -> Function:
    return fold_function(fn, max_bytes)[0]


def fold_function(fn: Function, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[Function, int]:
    """fn with constant computations folded, let-bound constants inlined (their bindings
    dropped) and ifs on a constant condition replaced by the branch taken; and how many
    folds. One memoised pass, children first (no recursion over the program)."""
    memo: dict[Expr, Expr] = {}
    lets = {e.var: e for e in post_order(fn) if isinstance(e, Let)}
    folded = 0
    for node in post_order(fn):
        if isinstance(node, Var) and node in lets and _is_constant(memo[lets[node].value]):
            memo[node] = memo[lets[node].value]  # uses of a constant binding see the value
            continue
        if isinstance(node, Let) and isinstance(memo.get(node.var), Constant | Tuple):
            memo[node] = memo[node.body]
            folded += 1
            continue
        if isinstance(node, If) and isinstance(cond := memo[node.cond], Constant):
            memo[node] = memo[node.true_branch if bool(cond.data) else node.false_branch]
            folded += 1
            continue
        post = node if isinstance(node, Var | Constant | GlobalVar) else rebuild(node, memo)
        if isinstance(post, Call):
            value = constant_value(post)
            if value is not None:
                values = value if isinstance(value, tuple) else (value,)
                if sum(v.nbytes for v in values) <= max_bytes:
                    post = as_constant(value)
                    folded += 1
        elif isinstance(post, TupleGetItem):
            post = fold(post)
        memo[node] = post
    out = memo[fn]
    assert isinstance(out, Function)
    return out, folded


def _is_constant(e: Expr) -> bool:
    """A constant, or a tuple of constants (what folding a tuple-valued call gives)."""
    return isinstance(e, Constant) or (
        isinstance(e, Tuple) and all(isinstance(f, Constant) for f in e.fields)
    )


@register_pass
@dataclass(frozen=True)
class FoldConstant(FunctionPass):
    """Replace all-constant computations by their values (up to max_bytes per result)."""

    idempotent = True

    max_bytes: int = DEFAULT_MAX_BYTES
    opt_level = 2

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out, folded = fold_function(fn, self.max_bytes)
        record(FoldReport(calls_folded=folded))
        return out


@dataclass(frozen=True, slots=True)
class FoldReport(PassReport):
    """Calls evaluated at compile time in one function."""

    calls_folded: int
