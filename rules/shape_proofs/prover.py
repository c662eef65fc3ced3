"""Proofs of rules that move, broadcast or reduce elements, over symbolic shapes.

rules/proofs.py proves pointwise rules element by element; a rule with a transpose, a
reshape, a broadcast, a concatenation, a layout conversion, a reduction or a product is
proved here, for every shape: each tensor variable gets a rank (0 to MAX_RANK) and dims
that are z3 unknowns (>= 1), attribute variables take every value they can have at that
rank (each permutation; a new shape: unknown dims of every length up to MAX_RANK), and
the solver is asked for dims, attributes and elements where the left side is well typed,
the guards hold (read over the unknown dims by rules/shape_proofs/guards.py) and the right
side is ill-typed, has another shape, or differs at some index. The encodings are in
rules/shape_proofs/encoder.py.

A counterexample is made concrete (small dims preferred, elements from z3's model) and
both sides run on it in the reference interpreter; where they agree (a reduction the
solver knows nothing of, say, at a size where sum equals mean) the solver is asked again
with those dims excluded.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from egraph_ir.egraph.pattern import Match, PCall, PGet, POpt, PVar, walk
from egraph_ir.types import DTYPES as IR_DTYPES

from ..rule import FAST_MATH, NSZ, Rule
from ..smt import (
    FLOAT_BITS,
    FRAGMENT,
    LOGICAL,
    Encoder,
    OutsideFragment,
    pointwise,
)
from .counterexamples import (
    concrete,
    confirm,
    dim_terms,
    distinct,
    explicit,
    small_model,
    unknown_dims,
)
from .encoder import ANY_CONSTANT, MOVEMENT, TENSOR_OPS, NeedsAttr, Shaped, Tensor, TensorEncoder
from .guards import SymInt, condition
from .ops import OPS

Status = Literal["proven", "refuted", "unknown"]
MAX_RANK = 4
BLOCKED_RANK = 5
SHAPE_READERS = ("shape", "rank", "dim", "size", "reshaped")
LAYOUTS = ("NCHW", "NHWC", "NCHW4c", "NCHW8c", "NCHW16c")  # a layout variable's choices
RETRIES = 3  # counterexamples the interpreter does not confirm before giving up


def is_tensor_rule(rule: Rule) -> bool:
    """Does the rule move or combine elements, or guard on shapes? (Else it is pointwise
    and rules/proofs.py proves it element by element, over more dtypes.)"""
    moves = any(
        isinstance(q, PCall) and q.op in TENSOR_OPS for s in (rule.lhs, rule.rhs) for q in walk(s)
    )
    shaped = any(
        f"{name}(" in g.text.replace(" ", "") for g in rule.guards for name in SHAPE_READERS
    )
    return moves or shaped


@dataclass
class Outcome:
    """The verdict over every rank and attribute choice tried."""

    proven: int = 0
    open_: list[str] = field(default_factory=list)
    refuted: tuple[str, dict[str, Any]] | None = None
    opaque: set[str] = field(default_factory=set)
    dtypes: set[str] = field(default_factory=set)


def prove_tensor_rule(rule: Rule, timeout: float, z3: Any) -> tuple[Status, str, dict[str, Any]]:
    """(status, reason, counterexample) of a rule over symbolic shapes."""
    with _fresh_context(z3):
        return _prove(rule, timeout, z3)


@contextmanager
def _fresh_context(z3: Any) -> Iterator[None]:
    """Each rule in a z3 context of its own: z3's nonlinear integer search depends on the
    order of the terms a context has made, and a proof that takes 1 s after a fresh start
    took 20 s after a dozen others (measured). z3's Python API makes its default context
    on first use, so the prover points that at a new one for the rule and back after."""
    module = getattr(z3, "z3", None)
    if module is None or not hasattr(module, "_main_ctx"):
        yield
        return
    saved, module._main_ctx = module._main_ctx, None
    try:
        yield
    finally:
        module._main_ctx = saved


def _prove(rule: Rule, timeout: float, z3: Any) -> tuple[Status, str, dict[str, Any]]:
    start = time.perf_counter()
    outcome = Outcome()
    try:
        _within_fragment(rule)
    except OutsideFragment as exc:
        return "unknown", str(exc), {}
    allowed = _allowed_ranks(rule, z3, _tensor_variables(rule))
    choices = [(d, r) for d in _value_dtypes(rule) for r in _rank_choices(allowed)]
    for dtype, ranks in choices:
        pending: list[dict[str, Any]] = [{}]
        try:
            while pending and outcome.refuted is None:
                attrs = pending.pop()
                label = _label(ranks, attrs, dtype)
                left = timeout - (time.perf_counter() - start)
                if left <= 0:
                    raise OutsideFragment("out of time before every rank was tried")
                try:
                    _check(rule, z3, dtype, ranks, attrs, left, outcome, label)
                except NeedsAttr as need:
                    pending += [{**attrs, need.name: v} for v in _attr_choices(z3, need)]
        except OutsideFragment as exc:  # the same at every other choice: stop here
            outcome.open_.append(f"{label}: {exc}")
            break
        if outcome.refuted is not None:
            break
    return _verdict(rule, outcome)


def _verdict(rule: Rule, o: Outcome) -> tuple[Status, str, dict[str, Any]]:
    if o.refuted is not None:
        return "refuted", o.refuted[0], o.refuted[1]
    if o.open_:
        head = f"proven for {o.proven} rank and attribute choices; " if o.proven else ""
        return "unknown", head + "not for " + "; ".join(o.open_[:3]), {}
    if not o.proven:
        return "unknown", f"its left side never applies at ranks up to {max_rank(rule)}", {}
    semantics = "over the reals (fast-math)" if FAST_MATH in rule.tags else "bit for bit"
    if NSZ in rule.tags and FAST_MATH not in rule.tags:
        semantics = "zeros compared without sign (nsz)"
    whatever = ""
    if o.opaque:
        it = "whatever they compute" if len(o.opaque) > 1 else "whatever it computes"
        whatever = f" ({', '.join(sorted(o.opaque))}: {it})"
    return (
        "proven",
        f"{semantics}{whatever} for every shape up to rank {max_rank(rule)} (dims symbolic, >= 1;"
        f" {o.proven} rank and attribute choices) and values of {', '.join(sorted(o.dtypes))}",
        {},
    )


# ---------------------------------------------------------------- choices
def _tensor_variables(rule: Rule) -> dict[str, str]:
    """Each tensor variable and its kind: "bool" for a condition, "any" elsewhere."""
    kinds: dict[str, str] = {}
    for side in (rule.lhs, rule.rhs):
        for q in walk(side):
            if isinstance(q, PCall):
                for k, a in enumerate(q.args):
                    if isinstance(a, PVar):
                        boolean = (q.op == "where" and k == 0) or q.op in LOGICAL
                        kinds.setdefault(a.name, "bool" if boolean else "any")
            elif isinstance(q, PVar):
                kinds.setdefault(q.name, "any")
    return kinds


def _value_dtypes(rule: Rule) -> tuple[str, ...]:
    """One float and one integer dtype where elements are computed on; one dtype where
    they are only moved (any other moves the same), or where the rule is fast-math (a
    claim over the reals, which float32 stands for)."""
    ops = {q.op for s in (rule.lhs, rule.rhs) for q in walk(s) if isinstance(q, PCall)}
    if ops <= MOVEMENT or FAST_MATH in rule.tags:
        return ("float32",)
    return ("float32", "int8")


def max_rank(rule: Rule) -> int:
    """MAX_RANK, or BLOCKED_RANK where a rule converts layouts (NCHW16c has five axes)."""
    converts = any(
        isinstance(q, PCall) and q.op == "layout_transform"
        for s in (rule.lhs, rule.rhs)
        for q in walk(s)
    )
    return BLOCKED_RANK if converts else MAX_RANK


def _within_fragment(rule: Rule) -> None:
    """Refuse, before any rank is tried, a rule with an op or pattern never modelled."""
    for side in (rule.lhs, rule.rhs):
        for q in walk(side):
            if isinstance(q, PGet | POpt):
                raise OutsideFragment(
                    f"{type(q).__name__} patterns are outside the prover's fragment"
                )
            if isinstance(q, PCall) and not (
                q.op in FRAGMENT or q.op in TENSOR_OPS or pointwise(q.op)
            ):
                raise OutsideFragment(f"op {q.op} is outside the prover's fragment")


def _allowed_ranks(rule: Rule, z3: Any, names: dict[str, str]) -> dict[str, list[int]]:
    """The ranks each variable may take: those no guard on it alone rules out
    (`rank(?x) == 4`), so the product of choices stays small."""
    top = max_rank(rule)
    allowed = {}
    for name in names:
        keep = []
        for rank in range(top + 1):
            dims = tuple(SymInt(z3.Int(f"{name}.d{k}"), 1) for k in range(rank))
            match = Match({name: Shaped(dims, "float32")}, {}, ANY_CONSTANT)
            if not any(_never(z3, g, match) for g in rule.guards if not g.reads_values):
                keep.append(rank)
        allowed[name] = keep
    return allowed


def _never(z3: Any, guard: Any, match: Match) -> bool:
    try:
        return bool(z3.is_false(z3.simplify(condition(z3, lambda: guard.evaluate(match), ""))))
    except (OutsideFragment, KeyError):
        return False  # it reads another variable or an attribute: not decided alone


def _rank_choices(allowed: dict[str, list[int]]) -> Iterator[dict[str, int]]:
    """Every assignment of the allowed ranks, lowest total first."""
    choices = itertools.product(*allowed.values())
    for ranks in sorted(choices, key=lambda r: (sum(r), r)):
        yield dict(zip(allowed, ranks, strict=True))


def _attr_choices(z3: Any, need: NeedsAttr) -> list[Any]:
    rank = need.ranks[0] if need.ranks else 0
    if need.attribute == "axes" and need.op == "transpose":
        return [tuple(p) for p in itertools.permutations(range(rank))]
    if need.attribute in ("newshape", "shape"):
        return [
            tuple(SymInt(z3.Int(f"{need.name}.{k}"), 1) for k in range(n))
            for n in range(MAX_RANK + 1)
        ]
    if need.attribute == "axis" and need.op == "squeeze":
        return [(a,) for a in range(rank)] + list(itertools.combinations(range(rank), 2))
    if need.attribute == "axis" and need.op in ("sum", "mean", "max", "min", "prod"):
        return [None] + [(a,) for a in range(rank)]
    if need.attribute == "axis" and need.op == "expand_dims":
        return list(range(-rank - 1, rank + 1))
    if need.attribute == "axis":
        return list(range(-rank, rank + (need.op == "flatten")))
    if need.attribute in ("src_layout", "dst_layout"):
        return list(LAYOUTS)
    if need.attribute in ("num_newaxis",):
        return [0, 1, 2]
    if need.attribute == "keepdims":
        return [False, True]
    if need.attribute == "dtype":
        return list(IR_DTYPES)
    raise OutsideFragment(f"attribute {need.attribute} of {need.op} as a variable (?{need.name})")


def _label(ranks: dict[str, int], attrs: dict[str, Any], dtype: str) -> str:
    shown = [f"rank({k}) = {v}" for k, v in ranks.items()]
    shown += [f"?{k} = {_plain(v)}" for k, v in attrs.items()]
    return ", ".join([*shown, dtype])


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_plain(x) for x in v)
    return "?" if isinstance(v, SymInt) else v


# ---------------------------------------------------------------- one choice
def _check(
    rule: Rule,
    z3: Any,
    dtype: str,
    ranks: dict[str, int],
    attrs: dict[str, Any],
    timeout: float,
    outcome: Outcome,
    label: str,
) -> None:
    """Prove, refute or leave open one choice of dtype, ranks and attributes: first with
    the arithmetic as functions z3 knows nothing of (cheap; a proof holds whatever they
    compute), then with each op's own semantics."""
    arithmetic = any(
        isinstance(q, PCall) and q.op not in MOVEMENT | LOGICAL | {"where"}
        for s in (rule.lhs, rule.rhs)
        for q in walk(s)
    )
    for abstract in (True, False) if arithmetic else (False,):
        query = _query(rule, z3, dtype, ranks, attrs, abstract)
        if query is None:
            return  # the left side never applies here
        solver, enc, scalar, symbolic = query
        solver.set("timeout", max(1, int(timeout * 1000)))
        answer = solver.check()
        if answer == z3.unsat:
            outcome.proven += 1
            outcome.opaque |= scalar.opaque
            outcome.dtypes.add(dtype)
            return
        if abstract:
            continue  # differs for some function: ask again with the ops' semantics
        if answer != z3.sat:
            outcome.open_.append(f"{label}: the solver gave up ({solver.reason_unknown()})")
            return
        _refute(rule, z3, solver, enc, scalar, symbolic, dtype, outcome, label)


def _query(
    rule: Rule, z3: Any, dtype: str, ranks: dict[str, int], attrs: dict[str, Any], abstract: bool
) -> tuple[Any, TensorEncoder, Encoder, dict[str, Any]] | None:
    """A solver holding: the left side applies and the right side differs (None where
    the left side never applies at these ranks)."""
    kinds = _tensor_variables(rule)
    types = {n: ("bool" if k == "bool" else dtype) for n, k in kinds.items()}
    scalar = Encoder(z3, types, attrs, FAST_MATH in rule.tags and dtype in FLOAT_BITS)
    scalar.abstract = abstract
    enc = TensorEncoder(z3, scalar, ranks, attrs, OPS)
    if any(_never(z3, g, enc.match()) for g in rule.guards if not g.reads_values):
        return None  # decided by the ranks and the attributes chosen so far
    outside: OutsideFragment | None = None
    try:
        left, left_typed = enc.side(rule.lhs, dtype, left=True)
    except OutsideFragment as exc:  # it matters only where the guards hold
        outside, left, left_typed = exc, None, z3.BoolVal(True)
    if z3.is_false(z3.simplify(left_typed)):
        return None
    match = enc.match()
    try:
        guards = [
            condition(z3, partial(g.evaluate, match), f"guard '{g.text}'")
            for g in rule.guards
            if not g.reads_values
        ]
    except OutsideFragment:
        raise outside or OutsideFragment from None  # the left side's reason first
    hypotheses = z3.simplify(z3.And(left_typed, *guards))
    if z3.is_false(hypotheses):
        return None
    if outside is not None:
        raise outside
    assert left is not None
    symbolic = {k: v for k, v in attrs.items() if _has_sym(v)}
    solver = z3.Solver()
    solver.add(*enc.facts, *(d >= 1 for v in symbolic.values() for d in dim_terms(v)), hypotheses)
    if solver.check() == z3.unsat:
        return None
    right, right_typed = enc.side(rule.rhs, left.dtype, left=False)
    index = [z3.FreshInt("j") for _ in left.shape]
    known = len(enc.facts)
    solver.add(_differs(z3, enc, scalar, rule, left, right, right_typed, index))
    solver.add(*enc.facts[known:])  # the offsets the elements split into indices
    return solver, enc, scalar, symbolic


def _refute(
    rule: Rule,
    z3: Any,
    solver: Any,
    enc: TensorEncoder,
    scalar: Encoder,
    symbolic: dict[str, Any],
    dtype: str,
    outcome: Outcome,
    label: str,
) -> None:
    """Make the solver's counterexamples concrete until the interpreter confirms one."""
    for _ in range(RETRIES):
        model = small_model(z3, solver, enc, symbolic)
        example = concrete(z3, model, enc, scalar, scalar.types, enc.attrs)
        if example is None:
            outcome.open_.append(f"{label}: a counterexample too large to run")
            return
        lhs = explicit(rule.lhs, enc.implicit)
        for arrays in (example[0], distinct(example[0])):  # distinct: where the model's
            confirmed = confirm(rule, lhs, (arrays, example[1]), dtype)  # values hide it
            if confirmed is not None:
                at = _label(enc.ranks, example[1], dtype)
                outcome.refuted = (f"at {at}: {confirmed}", {**arrays, **example[1]})
                return
        dims = unknown_dims(enc, symbolic)
        solver.add(z3.Or(False, *(d != model.eval(d, model_completion=True) for d in dims)))
        if solver.check() != z3.sat:
            break
    outcome.open_.append(
        f"{label}: the solver's counterexamples do not reproduce in the interpreter"
        + (f" (they lean on {', '.join(sorted(scalar.opaque))})" if scalar.opaque else "")
    )


def _differs(
    z3: Any,
    enc: TensorEncoder,
    scalar: Encoder,
    rule: Rule,
    left: Tensor,
    right: Tensor,
    right_typed: Any,
    index: list[Any],
) -> Any:
    """The right side is ill-typed, shaped otherwise, or differs at `index` (encoding the
    elements there may add facts to `enc`: the caller adds them)."""
    if len(left.shape) != len(right.shape):
        return z3.BoolVal(True)
    same_shape = z3.And(True, *(a == b for a, b in zip(left.shape, right.shape, strict=True)))
    inside = z3.And(True, *(z3.And(j >= 0, j < d) for j, d in zip(index, left.shape, strict=True)))
    a = scalar.flagged(lambda: left.at(index))
    b = scalar.flagged(lambda: right.at(index))
    agree = scalar.agree(a, b, left.dtype, nsz=NSZ in rule.tags)
    return z3.Or(z3.Not(right_typed), z3.Not(same_shape), z3.And(inside, z3.Not(agree)))


def _has_sym(v: Any) -> bool:
    return isinstance(v, SymInt) or (isinstance(v, tuple) and any(_has_sym(x) for x in v))


__all__ = ["MAX_RANK", "Status", "is_tensor_rule", "prove_tensor_rule"]
