"""AnnotateTarget: mark every call with the target that will compile it.

A call goes to the first target in the list that supports it (`ir.op.supports`: the op's
registered support and predicate, or a composite's name prefix), else to `default` (the
host). Each annotated node gets `compiler_begin(arg, T)` on every input and, for every
consumer, its own `compiler_end(node, T)`, so each edge between two nodes reads
`compiler_begin(compiler_end(producer, Tp), Tc)`. Variables and constants get a begin only.
With `include_non_call_ops` tuples and tuple fields are annotated too: with their inputs'
target when all agree, else `default`; without it they stay outside every region.

With no targets every call goes to `default`: the RFC's "annotate default" step, which
makes every node's region explicit. Running the pass again keeps every non-default choice
and offers the `default` calls to the new list, so AnnotateTarget([A]) then
AnnotateTarget([B]) equals AnnotateTarget([A, B]).
Functions with Let or If keep those nodes outside regions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from egraph_ir.errors import ConfigError
from egraph_ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var, children
from egraph_ir.infer import infer_type
from egraph_ir.inline import rebuild_keeping_functions
from egraph_ir.module import IRModule
from egraph_ir.op import call as op_call
from egraph_ir.registry import Op
from egraph_ir.support import composite_target, supports
from egraph_ir.visitor import post_order

from ...context import PassContext
from ...pass_base import FunctionPass
from ...registry import register_pass
from ...run import PassReport, record
from .regions import BEGIN, DEFAULT, END, annotation


def begin(x: Expr, target: str) -> Call:
    return op_call(BEGIN, x, compiler=target)


def end(x: Expr, target: str) -> Call:
    return op_call(END, x, compiler=target)


def strip_annotations(body: Expr) -> tuple[Expr, dict[Expr, str]]:
    """`body` without annotations, and the non-default target each annotated node had."""
    memo: dict[Expr, Expr] = {}
    kept: dict[Expr, str] = {}
    for n in post_order(body, into_functions=False):
        kind = annotation(n)
        if kind is not None:
            inner = memo[n.args[0]]  # type: ignore[attr-defined]
            memo[n] = inner
            if kind[0] == "end" and kind[1] != DEFAULT:
                kept[inner] = kind[1]
            continue
        memo[n] = n if isinstance(n, Var | Constant) else rebuild_keeping_functions(n, memo)
    return memo[body], kept


@register_pass
@dataclass(frozen=True)
class AnnotateTarget(FunctionPass):
    """Annotate calls with their target (see the module docstring)."""

    targets: Sequence[str] = ()
    include_non_call_ops: bool = True
    required = ("InferType",)
    idempotent = True

    def __post_init__(self) -> None:
        targets = [self.targets] if isinstance(self.targets, str) else list(self.targets)
        if not all(isinstance(t, str) and t for t in targets):
            raise ConfigError(f"AnnotateTarget needs a list of target names, got {self.targets!r}")
        if DEFAULT in targets:
            raise ConfigError("'default' (the host) is not a target to annotate for")
        object.__setattr__(self, "targets", tuple(targets))

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        if not fn.body.has_type:  # called alone on an untyped module: predicates read types
            infer_type(mod)
        body, kept = strip_annotations(fn.body)
        if body is not fn.body:
            infer_type(Function(fn.params, body, fn.ret_type, fn.attrs))

        def choose(n: Call) -> str:
            if n in kept:
                return kept[n]
            name = composite_target(n.op) if isinstance(n.op, Function) else None
            if name is not None:
                return name if name in self.targets else DEFAULT
            if isinstance(n.op, Op):
                return next((t for t in self.targets if supports(t, n)), DEFAULT)
            return DEFAULT

        out = annotate_function(fn, body, choose, self.include_non_call_ops)
        annotated: dict[str, int] = {}
        for n in post_order(out.body, into_functions=False):
            if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == END:
                t = str(n.attrs["compiler"])
                annotated[t] = annotated.get(t, 0) + 1
        record(AnnotateReport(region_outputs=annotated))
        return out


def annotate_function(
    fn: Function,
    body: Expr,
    choose: Callable[[Call], str],
    include_non_call_ops: bool,
) -> Function:
    """fn with `body` (its body without annotations) annotated: each call on the target
    `choose` gives it; tuples and fields (with include_non_call_ops) on their inputs'
    target when all agree, else the host."""
    result, _ = annotate_body(body, choose, include_non_call_ops)
    if result is fn.body:
        return fn
    out = Function(fn.params, result, fn.ret_type, fn.attrs, fn.span)
    infer_type(out)
    return out


def annotate_body(
    body: Expr, choose: Callable[[Call], str], include_non_call_ops: bool
) -> tuple[Expr, dict[Expr, Expr]]:
    """`body` annotated as annotate_function does, and each of its nodes' annotated
    counterpart (placement predicts regions from them)."""
    target: dict[Expr, str] = {}
    memo: dict[Expr, Expr] = {}
    for n in post_order(body, into_functions=False):
        if isinstance(n, Var | Constant):
            memo[n] = n
            continue
        t: str | None = None
        if isinstance(n, Call):
            t = choose(n)
        elif isinstance(n, Tuple | TupleGetItem) and include_non_call_ops:
            fields = n.fields if isinstance(n, Tuple) else (n.tuple_value,)
            seen = {target[f] for f in fields if f in target}
            t = seen.pop() if len(seen) == 1 else DEFAULT
        new = rebuild_keeping_functions(n, _edges(n, memo, target, t))
        memo[n] = new
        if t is not None:
            target[n] = t
    result = memo[body]
    if body in target:
        result = end(result, target[body])
    return result, memo


@dataclass(frozen=True, slots=True)
class AnnotateReport(PassReport):
    """Annotated values leaving a region (compiler_end) in one function, by target
    ('default': the host)."""

    region_outputs: dict[str, int]


def _edges(
    n: Expr, memo: dict[Expr, Expr], target: dict[Expr, str], mine: str | None
) -> dict[Expr, Expr]:
    """The rewritten inputs of n: each annotated producer behind its own compiler_end, and
    (when n is annotated) every input behind a compiler_begin of n's target."""
    view: dict[Expr, Expr] = {}
    for c in children(n):
        if c in view:
            continue
        if isinstance(c, Function) or (isinstance(n, Call) and c is n.op):
            view[c] = memo.get(c, c)  # a callee, not a value flowing in
            continue
        value = memo[c]
        if c in target:
            value = end(value, target[c])
        if mine is not None:
            value = begin(value, mine)
        view[c] = value
    return view
