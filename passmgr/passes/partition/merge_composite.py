"""MergeComposite: each match of a pattern table becomes one call of a composite function.

For every pattern, in table order (the table's priority), the function is scanned from its
outputs towards its inputs; a match that overlaps no earlier one, whose inner values are
used only inside it, and that passes the pattern's guards and check becomes

    fn (%x, %w, %b, Composite="blas.dense", PartitionedFromPattern="dense_add_relu_") {...}

called with the matched inputs: one parameter per distinct input, named after the pattern
variable that bound it. AnnotateTarget later hands such a call to the target its name
starts with; codegen.build inlines the composites that stay on the host.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from egraph_ir.egraph import PVar
from egraph_ir.egraph.pattern import walk
from egraph_ir.errors import ConfigError
from egraph_ir.expr import Call, Constant, Expr, Function, TupleGetItem, Var, children
from egraph_ir.infer import infer_type
from egraph_ir.inline import rebuild_keeping_functions
from egraph_ir.module import IRModule
from egraph_ir.registry import Op
from egraph_ir.visitor import post_order, rebuild
from rules.patterns import (
    CompositeMatch,
    CompositePattern,
    builtin_patterns,
    load_patterns,
    pattern_table,
)

from ...context import PassContext
from ...pass_base import FunctionPass
from ...registry import register_pass
from ...run import PassReport, record


def read_table(table: Any) -> list[CompositePattern]:
    """A table from entries, a built-in table's name or a pattern file's path."""
    if isinstance(table, str):
        if table.endswith(".patterns") or "/" in table:
            return load_patterns(table)
        return builtin_patterns(table)
    if not isinstance(table, Iterable):
        raise ConfigError(f"MergeComposite needs a pattern table, got {table!r}")
    return pattern_table(table)


def pattern_name(nodes: Iterable[Expr]) -> str:
    """PartitionedFromPattern: the matched op names in post-order, each followed by '_'."""
    parts = []
    for n in nodes:
        if isinstance(n, Call) and isinstance(n.op, Op):
            parts.append(n.op.name + "_")
        elif isinstance(n, TupleGetItem):
            parts.append(f"TupleGetItem{n.index}_")
    return "".join(parts)


@register_pass
@dataclass(frozen=True)
class MergeComposite(FunctionPass):
    """Turn pattern matches into composite function calls (see the module docstring)."""

    table: Any = ()
    patterns: list[CompositePattern] = field(init=False, repr=False, compare=False)
    required = ("InferType",)
    idempotent = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", read_table(self.table))

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = fn
        merged: dict[str, int] = {}
        for entry in self.patterns:
            body, count = merge_pattern(out.body, entry)
            if count:
                merged[entry.name] = merged.get(entry.name, 0) + count
                out = Function(out.params, body, out.ret_type, out.attrs, out.span)
                infer_type(out)
        record(CompositeReport(merged=merged))
        return out


@dataclass(frozen=True, slots=True)
class CompositeReport(PassReport):
    """Composite functions made in one function, by pattern name."""

    merged: dict[str, int]


def merge_pattern(body: Expr, entry: CompositePattern) -> tuple[Expr, int]:
    """`body` with every accepted match of one pattern turned into a composite call."""
    nodes = list(post_order(body, into_functions=False))
    users: dict[Expr, list[Expr]] = defaultdict(list)
    for n in nodes:
        for c in dict.fromkeys(children(n)):
            users[c].append(n)
    claimed: set[Expr] = set()
    matches: dict[Expr, CompositeMatch] = {}
    for n in reversed(nodes):  # outputs first: the largest match at each root wins
        if n in claimed or not isinstance(n, Call | TupleGetItem):
            continue
        m = entry.match(n)
        if m is None or any(x in claimed for x in m.nodes):
            continue
        inside = set(m.nodes)
        if any(u not in inside for x in m.nodes if x is not n for u in users[x]):
            continue  # an inner value is used elsewhere: the composite would hide it
        if any(x is body for x in m.nodes if x is not n):
            continue
        claimed.update(m.nodes)
        matches[n] = m
    if not matches:
        return body, 0
    memo: dict[Expr, Expr] = {}
    for n in nodes:
        if n in matches:
            memo[n] = _composite_call(entry, matches[n], memo)
        elif n in claimed:
            continue  # exists only inside its composite
        elif isinstance(n, Var | Constant):
            memo[n] = n
        else:
            memo[n] = rebuild_keeping_functions(n, memo)
    return memo[body], len(matches)


def _composite_call(entry: CompositePattern, m: CompositeMatch, outer: dict[Expr, Expr]) -> Call:
    order = [p.name for p in walk(entry.pattern) if isinstance(p, PVar)]
    names = sorted(m.tensors, key=lambda v: (order.index(v) if v in order else len(order), v))
    params: dict[Expr, Var] = {}
    for name in names:
        value = m.tensors[name]
        if value not in params:
            params[value] = Var(name, value.checked_type)
    inner: dict[Expr, Expr] = dict(params)
    for x in m.nodes:  # inputs before users
        for c in children(x):
            if c not in inner:
                inner[c] = c  # a constant written in the pattern (a literal) or a callee
        inner[x] = rebuild(x, inner)
    fn = Function(tuple(params.values()), inner[m.root], m.root.checked_type)
    fn = fn.with_attr("Composite", entry.name).with_attr(
        "PartitionedFromPattern", pattern_name(m.nodes)
    )
    return Call(fn, tuple(outer[v] for v in params))
