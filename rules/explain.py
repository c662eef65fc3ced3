"""Why a rule did or did not fire on a program: `explain(rule, module) -> Explanation`.

For every place where the rule's left-hand root op occurs in main, the pattern is matched
against the program as it is, step by step, and the first thing that fails is named: an
op, a constant, an attribute value, a variable bound to two different values, or a guard
with the values it read (dtypes, shapes, constants). Where a place matches, one
saturation (egraph_ir.egraph.optimize, the EqSat pass's engine) with this rule and the
other rules of its pass (`along`) says what became of it: applied and kept by
extraction, applied but lost in extraction (the cost model kept the left side; both
costs given), refused because the rewrite would change a type, or not applied because a
limit stopped saturation first. A `fast-math` or `nsz` tag that keeps the rule off is
said before anything else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from egraph_ir.egraph import Limits, Match, Stop, optimize
from egraph_ir.egraph.pattern import AttrVar, Pattern, PCall, PGet, PLit, PVar
from egraph_ir.expr import Call, Constant, Expr, Function, TupleGetItem, short_repr
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.structural import structural_equal
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order

from .guards import normalise_value
from .rule import FAST_MATH, NSZ, Rule

VARIABLE = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Site:
    """One place where the left side's root op occurs: `where` (the expression and the
    model node it came from), whether the whole pattern and its guards matched there, and
    what failed first (or what matched)."""

    where: str
    matched: bool
    detail: str


@dataclass
class Explanation:
    rule: str
    location: str
    verdict: str  # the one-line answer
    sites: list[Site] = field(default_factory=list)
    tag: str = ""  # why a tag keeps the rule off ("" where none does)
    saturation: str = ""  # what one saturation with the rule alone did, where it ran

    def __str__(self) -> str:
        lines = [f"rule {self.rule} ({self.location}): {self.verdict}"]
        if self.tag:
            lines.append(f"  tag: {self.tag}")
        for s in self.sites:
            lines.append(f"  {'matches' if s.matched else 'no match'} at {s.where}: {s.detail}")
        if self.saturation:
            lines.append(f"  saturation: {self.saturation}")
        return "\n".join(lines)


def explain(
    rule: Rule,
    module: IRModule | Function,
    fast_math: bool = False,
    limits: Limits | None = None,
    cost_model: str = "balanced",
    along: Iterable[Rule] = (),
) -> Explanation:
    """Explain `rule` on main of `module` as it is (run the passes before it first);
    `fast_math`: whether eqsat.fast_math would be on; `limits`, `cost_model`: the
    saturation's, as the EqSat pass would set them; `along`: the other rules that pass
    saturates with (they share its limits: a rule can be starved by them)."""
    fn = module["main"] if isinstance(module, IRModule) else module
    infer_type(fn)
    explanation = Explanation(rule.name, rule.location, "")
    tagged = [t for t in (FAST_MATH, NSZ) if t in rule.tags]
    if tagged and not fast_math:
        explanation.tag = (
            f"tagged {', '.join(tagged)}: the rule runs only under eqsat.fast_math, off here"
        )
    root = rule.lhs.tuple_value if isinstance(rule.lhs, PGet) else rule.lhs
    assert isinstance(root, PCall)
    for e in post_order(fn.body):
        if isinstance(e, Call) and getattr(e.op, "name", None) == root.op:
            target = e
            if isinstance(rule.lhs, PGet):
                continue  # a projection's root: matched from its TupleGetItem below
            explanation.sites.append(_site(rule, rule.lhs, target))
        elif isinstance(e, TupleGetItem) and isinstance(rule.lhs, PGet) and _calls(e, root.op):
            explanation.sites.append(_site(rule, rule.lhs, e))
    explanation.verdict = _verdict(explanation, root.op)
    if any(s.matched for s in explanation.sites) and not explanation.tag:
        others = [r for r in along if r.name != rule.name]
        saturated = _saturate(rule, others, fn, limits, cost_model)
        explanation.saturation, explanation.verdict = saturated
    return explanation


def _calls(e: TupleGetItem, op: str) -> bool:
    return getattr(getattr(e.tuple_value, "op", None), "name", None) == op


def _verdict(explanation: Explanation, op: str) -> str:
    if explanation.tag:
        return "kept off by its tag"
    if not explanation.sites:
        return f"op {op} does not occur in the program"
    matched = sum(s.matched for s in explanation.sites)
    if not matched:
        return f"none of the {len(explanation.sites)} place(s) with {op} matches"
    return f"{matched} of {len(explanation.sites)} place(s) match"


# ---------------------------------------------------------------- matching, step by step
class _NoMatch(Exception):
    pass


def _site(rule: Rule, lhs: Pattern, e: Expr) -> Site:
    where = _where(e)
    bound: dict[str, Expr] = {}
    attrs: dict[str, Any] = {}
    try:
        _match(lhs, e, bound, attrs, "the root")
    except _NoMatch as failure:
        return Site(where, False, str(failure))
    consts = {n: x.data for n, x in bound.items() if isinstance(x, Constant)}
    match = Match({n: x.checked_type for n, x in bound.items()}, attrs, consts)
    for guard in rule.guards:
        try:
            holds = guard(match)
        except Exception as exc:  # a guard on something this binding lacks
            holds, why = False, f" ({exc})"
        else:
            why = ""
        if not holds:
            read = _read_by(guard.text, bound, attrs)
            return Site(where, False, f"guard `{_tidy(guard.text)}` fails{why}: {read}")
    shown = ", ".join(f"?{n} = {_show(x)}" for n, x in bound.items())
    return Site(where, True, f"the pattern matches ({shown}) and every guard holds")


def _match(p: Pattern, e: Expr, bound: dict[str, Expr], attrs: dict[str, Any], at: str) -> None:
    if isinstance(p, PVar):
        if p.name in bound and not structural_equal(bound[p.name], e):
            raise _NoMatch(
                f"?{p.name} is {_show(bound[p.name])} in one place and {_show(e)} at {at}"
            )
        bound.setdefault(p.name, e)
        return
    if isinstance(p, PLit):
        if not isinstance(e, Constant):
            raise _NoMatch(f"{at} must be the constant {p.value}, it is {_show(e)}")
        if e.data.size == 0 or not np.all(e.data == p.value):
            raise _NoMatch(f"{at} must be the constant {p.value}, it is {_show(e)}")
        return
    if isinstance(p, PGet):
        if not isinstance(e, TupleGetItem) or e.index != p.index:
            raise _NoMatch(f"{at} must be field {p.index} of a tuple, it is {_show(e)}")
        _match(p.tuple_value, e.tuple_value, bound, attrs, at)
        return
    assert isinstance(p, PCall)
    name = getattr(e.op, "name", None) if isinstance(e, Call) else None
    if name != p.op:
        raise _NoMatch(f"{at} must be {p.op}(...), it is {_show(e)}")
    assert isinstance(e, Call)
    for key, want in p.attrs:
        have = normalise_value(e.attrs.get(key))
        if isinstance(want, AttrVar):
            if want.name in attrs and attrs[want.name] != have:
                raise _NoMatch(
                    f"attribute {key} of {p.op} at {at} is {have!r}, but {want.name} is "
                    f"{attrs[want.name]!r} elsewhere"
                )
            attrs[want.name] = have
        elif normalise_value(want) != have:
            raise _NoMatch(
                f"attribute {key} of {p.op} at {at} is {have!r}; the rule wants {want!r}"
            )
    if len(p.args) != len(e.args):
        raise _NoMatch(f"{p.op} at {at} has {len(e.args)} argument(s); the rule has {len(p.args)}")
    for k, (sub, arg) in enumerate(zip(p.args, e.args, strict=True)):
        _match(sub, arg, bound, attrs, f"argument {k} of {p.op} ({at})")


def _read_by(text: str, bound: dict[str, Expr], attrs: dict[str, Any]) -> str:
    """What the guard read: each variable it names, with its type (and value)."""
    parts = []
    for name in dict.fromkeys(v[1:] for v in VARIABLE.findall(text)):
        if name in bound:
            parts.append(f"?{name} = {_show(bound[name])}")
        elif name in attrs:
            parts.append(f"?{name} = {attrs[name]!r}")
    return "; ".join(parts) or "(no variable)"


def _tidy(text: str) -> str:
    """A guard's source as written (its tokens come back joined by spaces)."""
    text = re.sub(r"\s*([(\[])\s*", r"\1", text)
    return re.sub(r"\s+([)\],])", r"\1", text)


def _show(e: Expr) -> str:
    t = e.checked_type if e.has_type else None
    typed = f" : {t}" if isinstance(t, TensorType) else ""
    if isinstance(e, Constant) and e.data.size <= 4:
        return f"constant {np.asarray(e.data).tolist()!r}{typed}"
    return f"{short_repr(e)}{typed}"


def _where(e: Expr) -> str:
    span = getattr(e, "span", None)
    node = f" (model node {span.name})" if span is not None and span.name else ""
    return f"{short_repr(e)}{node}"


# ---------------------------------------------------------------- what saturation did
def _saturate(
    rule: Rule, others: list[Rule], fn: Function, limits: Limits | None, cost_model: str
) -> tuple[str, str]:
    """One saturation with the rule (and the others its pass runs): its summary and the
    verdict it gives."""
    rewrites = [w for r in [rule, *others] for w in r.rewrites()]
    result = optimize(fn, rewrites, limits, cost_model)
    report = result.report
    names = [r.name for r in rule.rewrites()]
    applied = sum(report.applied.get(n, 0) for n in names)
    refused = next((report.unsound[n] for n in names if n in report.unsound), "")
    summary = f"{report.summary()}; cost {result.cost_before:.4g} -> {result.cost_after:.4g}"
    if refused:
        return summary, f"refused: the rewrite would change a type ({refused})"
    if not applied:
        if report.stop_reason.kind is not Stop.SATURATED:
            return summary, f"not applied: saturation stopped first ({report.stop_reason})"
        rejected = sum(report.rejected_by_guard.get(n, 0) for n in names)
        return summary, f"not applied ({rejected} match(es) rejected by its guards in the e-graph)"
    if structural_equal(result.function.body, fn.body):
        return summary, (
            f"applied {applied} time(s) but lost in extraction: the cost model keeps the left "
            f"side (cost {result.cost_before:.4g}; no cheaper program with the rewrite)"
        )
    costs = f"cost {result.cost_before:.4g} -> {result.cost_after:.4g}"
    stopped = ""
    if report.stop_reason.kind is not Stop.SATURATED:
        stopped = f"; saturation stopped at its {report.stop_reason}: later matches may be missed"
    return summary, f"applied {applied} time(s); extraction keeps it ({costs}){stopped}"


__all__ = ["Explanation", "Site", "explain"]
