"""TabulateByteFunctions: an elementwise computation of one 8-bit tensor that ends in an
8-bit result is a function of 256 values, so it is one table read.

A quantised SiLU (x * sigmoid(x) from a QDQ model) reaches code generation as a requantized
product of x's shifted values and a table read (QLinearSigmoid's 256 entries), about 20
vector instructions per 16 values; as a table of the whole chain it is one read of 256
entries (byte permutes, codegen/llvm/lookup.py). The table holds what the interpreter
computes for each of the 256 inputs, the reference semantics every test compares against,
so the rewrite is exact. Taken only where the chain already reads a table: one read then
replaces a read plus arithmetic, so no machine loses (without byte permutes a table read is
a gather).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_ir import op
from egraph_ir.expr import Call, Constant, Expr, Function
from egraph_ir.module import IRModule
from egraph_ir.registry import Op, OpPattern
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order, rebuild

from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record

BYTES = ("uint8", "int8")
FAILS = object()  # a node that is no function of a single 8-bit tensor
CONSTANT = object()  # a node that depends on no tensor at all


def tabulate(fn: Function) -> tuple[Function, int]:
    """fn with each maximal elementwise chain from one 8-bit tensor to an 8-bit result,
    reading a table on the way, replaced by one table read; and how many were."""
    nodes = list(post_order(fn.body))
    order = {n: i for i, n in enumerate(nodes)}
    source = _sources(nodes)
    users: dict[Expr, int] = {}
    for n in nodes:
        for a in getattr(n, "args", ()):
            users[a] = users.get(a, 0) + 1
    covered: set[Expr] = set()
    tables: dict[Expr, tuple[np.ndarray, Expr]] = {}  # root -> (its table, its tensor)
    for n in reversed(nodes):  # consumers first: the longest chains win
        x = source.get(n)
        if n in covered or not _is_byte_call(n) or not isinstance(x, Expr) or x is n:
            continue
        cone = sorted(_cone(n, x), key=order.__getitem__)  # producers first
        if any(_is_table_read(c) for c in cone):
            tables[n] = (_table(n, x, cone), x)
            covered.update(c for c in cone if users.get(c, 0) <= 1)
    if not tables:
        return fn, 0
    memo: dict[Expr, Expr] = {}
    for n in post_order(fn):
        if n in tables:  # read at the rebuilt tensor: chains before it may be tables too
            table, x = tables[n]
            memo[n] = op.take(Constant(table), memo[x], axis=0, mode="fast")
        else:
            memo[n] = rebuild(n, memo)
    out = memo[fn]
    assert isinstance(out, Function)
    return out, len(tables)


def _sources(nodes: list[Expr]) -> dict[Expr, object]:
    """Per node, the one 8-bit tensor it is an elementwise function of (the deepest such),
    CONSTANT, or FAILS; nodes in post order, so arguments come first."""
    source: dict[Expr, object] = {}
    for n in nodes:
        if isinstance(n, Constant):
            source[n] = CONSTANT if n.data.size == 1 else FAILS
            continue
        found: object = FAILS
        if _is_table_read(n):
            found = source[n.args[1]]  # type: ignore[attr-defined]
        elif _is_pointwise(n):
            seen = {source[a] for a in n.args} - {CONSTANT}  # type: ignore[attr-defined]
            found = CONSTANT if not seen else seen.pop() if len(seen) == 1 else FAILS
        if isinstance(found, Expr) and _shape(found) != _shape(n):
            found = FAILS
        if found is FAILS and _is_byte(n):
            found = n  # a function of itself: the chains after it may start here
        source[n] = found
    return source


def _cone(root: Expr, x: Expr) -> set[Expr]:
    """The calls between x and root."""
    stack, seen = [root], {root}
    while stack:
        for a in getattr(stack.pop(), "args", ()):
            if a is not x and isinstance(a, Call) and a not in seen:
                seen.add(a)
                stack.append(a)
    return seen


def _table(root: Expr, x: Expr, cone: list[Expr]) -> np.ndarray:
    """root's value for each of the 256 values of x (cone: the calls between, producers
    first), in the order take's fast mode reads an 8-bit index (0..127 first, then
    -128..-1 for int8)."""
    x_t = x.checked_type
    assert isinstance(x_t, TensorType)
    probe = np.arange(256, dtype=np.uint8).view(x_t.dtype)
    values: dict[Expr, np.ndarray] = {x: probe.reshape((1,) * (len(x_t.shape) - 1) + (256,))}
    for n in cone:
        assert isinstance(n, Call) and isinstance(n.op, Op)
        args = [a.data if isinstance(a, Constant) else values[a] for a in n.args]
        values[n] = np.asarray(n.op.evaluate(args, n.attrs))
    return values[root].reshape(256)


def _is_pointwise(n: Expr) -> bool:
    return (
        isinstance(n, Call)
        and isinstance(n.op, Op)
        and n.op.pattern <= OpPattern.BROADCAST
        and not n.op.annotation
    )


def _is_table_read(n: Expr) -> bool:
    """take from a constant 1-D table at an index the same shape as the result."""
    return (
        isinstance(n, Call)
        and isinstance(n.op, Op)
        and n.op.name == "take"
        and isinstance(n.args[0], Constant)
        and n.args[0].data.ndim == 1
        and n.attrs["axis"] in (0, -1)
    )


def _is_byte(n: Expr) -> bool:
    t = getattr(n, "checked_type", None)
    return isinstance(t, TensorType) and t.dtype in BYTES


def _is_byte_call(n: Expr) -> bool:
    return isinstance(n, Call) and _is_byte(n)


def _shape(n: Expr) -> tuple[int, ...] | None:
    t = getattr(n, "checked_type", None)
    return t.shape if isinstance(t, TensorType) else None


@register_pass
@dataclass(frozen=True)
class TabulateByteFunctions(FunctionPass):
    """Elementwise chains from one 8-bit tensor to an 8-bit result, reading a table on the
    way, as one table read (see the module docstring)."""

    idempotent = True
    opt_level = 2
    required = ("InferType",)

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out, count = tabulate(fn)
        record(TabulateReport(tables=count))
        return out


@dataclass(frozen=True, slots=True)
class TabulateReport(PassReport):
    """Chains replaced by a table read in one function."""

    tables: int
