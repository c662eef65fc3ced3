"""Proofs of rules with an SMT solver: `prove(ruleset) -> ProofReport`.

The soundness checker (soundness.py) tests a rule on drawn bindings; this module asks z3
(the `z3-solver` package, the `prove` extra) whether any binding at all tells the two
sides apart. Each rule comes out `proven`, `refuted` (with a counterexample that the
reference interpreter confirms: both sides run on it and differ) or `unknown` (outside
the fragment below, out of time, or a counterexample the interpreter does not confirm).

The fragment: elementwise arithmetic (add, subtract, multiply, divide, negative, abs,
sqrt, maximum, minimum, relu), comparisons, where, the logical ops, casts between
floats and from integers to floats, and zeros_like/ones_like, over scalars (an elementwise
rule holds for tensors exactly where it holds per element; shapes are the property
checker's). Values are each dtype's own: IEEE floats with NaN, infinities, signed zeros
and round-to-nearest-even (z3's floating-point theory; float16 and bfloat16 compute in
float32 and round once per op, as the compiler does), fixed-width integers that wrap.
Tags are honoured: `fast-math` rules are proven over the reals (exact arithmetic; an
infinite left side claims nothing and 0/0 is NaN, as the property checker has it), `nsz`
rules compare zeros without their sign; `quantize` rules (equal within one quantum) are
not proved here. A rule is proven for every dtype its guards allow among bool, int8,
float16, bfloat16, int32, float32 and float64; guards that read values are checked on a
counterexample before it counts. The encodings are in rules/smt.py.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from egraph_ir.egraph import Match
from egraph_ir.egraph.pattern import AttrVar, Pattern, PCall, PLit, PVar
from egraph_ir.errors import CompilerError, RuleError
from egraph_ir.expr import Constant, Expr, Function
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType

from .bindings import instantiate
from .rule import FAST_MATH, NSZ, QUANTIZE, Rule, RuleSet
from .shape_proofs import Status, is_tensor_rule, prove_tensor_rule
from .sides import evaluate_side, same_values, show
from .smt import (
    FLOAT_BITS,
    FRAGMENT,
    LOGICAL,
    Encoder,
    OutsideFragment,
    numpy_dtype,
    pointwise,
)

# narrow types first: a counterexample in one is as good as in any, and found sooner
DTYPES = ("bool", "int8", "float16", "bfloat16", "int32", "float32", "float64")


@dataclass(frozen=True)
class ProofResult:
    """One rule's verdict; `reason` says what was proven, where the sides differ, or why
    the prover cannot say."""

    rule: str
    location: str
    status: Status
    reason: str
    counterexample: dict[str, Any] = field(default_factory=dict)  # variable -> value
    seconds: float = 0.0


@dataclass
class ProofReport:
    results: list[ProofResult]

    def with_status(self, status: Status) -> list[ProofResult]:
        return [r for r in self.results if r.status == status]

    def __getitem__(self, rule: str) -> ProofResult:
        return next(r for r in self.results if r.rule == rule)

    def __str__(self) -> str:
        lines = [
            f"{len(self.with_status('proven'))} proven, {len(self.with_status('refuted'))} "
            f"refuted, {len(self.with_status('unknown'))} unknown"
        ]
        for r in self.results:
            lines.append(f"{r.status:8} {r.rule} ({r.location}): {r.reason}")
        return "\n".join(lines)


def prove(rules: RuleSet | Iterable[Rule], timeout: float = 10.0) -> ProofReport:
    """Prove or refute each rule (each within `timeout` seconds of solver time)."""
    _z3()  # a missing solver is one clear error, before any rule
    return ProofReport([prove_rule(r, timeout) for r in rules])


def prove_rule(rule: Rule, timeout: float = 10.0) -> ProofResult:
    """One rule's verdict: refuted at the first dtype where the sides differ; proven
    where every dtype its guards allow is; else unknown, saying which dtypes were proven
    and which were not (out of time, outside the fragment)."""
    start = time.perf_counter()

    def result(status: Status, reason: str, example: dict[str, Any] | None = None) -> ProofResult:
        seconds = time.perf_counter() - start
        return ProofResult(rule.name, rule.location, status, reason, example or {}, seconds)

    if QUANTIZE in rule.tags:
        return result("unknown", "a quantize rule claims equality within one quantum only")
    if is_tensor_rule(rule):
        status, reason, example = prove_tensor_rule(rule, timeout, _z3())
        return result(status, reason, example)
    try:
        combos = _dtype_combos(rule)
    except OutsideFragment as exc:
        return result("unknown", str(exc))
    if not combos:
        return result("unknown", "no dtype its guards allow is one the prover models")
    proven: list[str] = []
    open_: list[str] = []
    opaque: set[str] = set()
    for types, attrs in combos:
        label = ", ".join(f"{k}: {v}" for k, v in {**types, **attrs}.items())
        left = timeout - (time.perf_counter() - start)
        if left <= 0:
            open_.append(f"{label}: out of time")
            continue
        try:
            verdict, detail = _check(rule, types, attrs, left)
        except OutsideFragment as exc:
            open_.append(f"{label}: {exc}")
            continue
        if verdict == "refuted":
            return result("refuted", f"at {label}: {detail['why']}", detail["values"])
        if verdict == "unknown":
            open_.append(f"{label}: {detail['why']}")
            continue
        proven.append(label)
        opaque |= detail["opaque"]
    semantics = "over the reals (fast-math)" if FAST_MATH in rule.tags else "bit for bit"
    if NSZ in rule.tags and FAST_MATH not in rule.tags:
        semantics = "zeros compared without sign (nsz)"
    whatever = f" ({', '.join(sorted(opaque))}: whatever they compute)" if opaque else ""
    at = (
        "; ".join(proven)
        if len(proven) <= 4
        else f"{len(proven)} dtype choices: {proven[0]} ... {proven[-1]}"
    )
    done = f"{semantics}{whatever} for {at}"
    if open_:
        head = f"proven {done}; " if proven else ""
        return result("unknown", head + "not for " + "; ".join(open_))
    return result("proven", done)


# ---------------------------------------------------------------- which dtypes
def _variables(p: Pattern, out: dict[str, str], want: str) -> None:
    """The pattern variables and the kind each position needs ("bool" for a where's
    condition and the logical ops' operands, "any" elsewhere)."""
    if isinstance(p, PVar):
        out.setdefault(p.name, want)
        return
    if isinstance(p, PLit):
        return
    if not isinstance(p, PCall):
        raise OutsideFragment(f"{type(p).__name__} patterns are outside the prover's fragment")
    if p.op not in FRAGMENT and not pointwise(p.op):
        raise OutsideFragment(f"op {p.op} is outside the prover's fragment")
    for k, a in enumerate(p.args):
        bool_arg = (p.op == "where" and k == 0) or p.op in LOGICAL
        _variables(a, out, "bool" if bool_arg else "any")


def _dtype_combos(rule: Rule) -> list[tuple[dict[str, str], dict[str, str]]]:
    """Each assignment of dtypes to the rule's variables (one shared dtype for the
    values, bool for conditions) and dtype attributes that its type-only guards allow."""
    kinds: dict[str, str] = {}
    _variables(rule.lhs, kinds, "any")
    _variables(rule.rhs, kinds, "any")
    attr_vars = sorted({v.name for p in (rule.lhs, rule.rhs) for v in _attr_vars(p)})
    combos = []
    for value_dtype in DTYPES:
        for chosen in itertools.product(DTYPES, repeat=len(attr_vars)):
            types = {v: ("bool" if k == "bool" else value_dtype) for v, k in kinds.items()}
            attrs = dict(zip(attr_vars, chosen, strict=True))
            mixed = value_dtype == "bool" and any(k != "bool" for k in kinds.values())
            if mixed and not _only_logical(rule):
                continue
            fresh = (types, attrs) not in combos
            if fresh and _guards_allow(rule, types, attrs) and _typed(rule.lhs, types, attrs):
                combos.append((types, attrs))
    return combos


def _only_logical(rule: Rule) -> bool:
    ops = {p.op for side in (rule.lhs, rule.rhs) for p in _calls(side)}
    return ops <= LOGICAL | {"where", "equal", "not_equal", "cast"}


def _calls(p: Pattern) -> list[PCall]:
    if not isinstance(p, PCall):
        return []
    return [p, *(c for a in p.args for c in _calls(a))]


def _attr_vars(p: Pattern) -> list[AttrVar]:
    return [v for c in _calls(p) for _, v in c.attrs if isinstance(v, AttrVar)]


def _typed(lhs: Pattern, types: dict[str, str], attrs: dict[str, str]) -> bool:
    """Is the left side well typed at these dtypes (else the rule never fires there)?"""
    consts = {n: np.ones((), dtype=numpy_dtype(d)) for n, d in types.items()}
    try:
        infer_type(
            IRModule.from_expr(
                Function((), _build(lhs, consts, attrs, _root_dtype(lhs, types, attrs)))
            )
        )
    except (CompilerError, ValueError, TypeError, KeyError):
        return False
    return True


def _guards_allow(rule: Rule, types: dict[str, str], attrs: dict[str, str]) -> bool:
    """Do the guards that read only types hold? (Guards that read values are checked on
    a counterexample, and shapes are a scalar's here.)"""
    consts = {n: np.ones((), dtype=numpy_dtype(d)) for n, d in types.items()}  # constants
    match = Match({n: TensorType((), d) for n, d in types.items()}, attrs, consts)
    for guard in rule.guards:
        if guard.reads_values:
            continue
        try:
            if not guard(match):
                return False
        except Exception:  # a guard on something a scalar binding does not have
            continue
    return True


# ---------------------------------------------------------------- the solver
def _z3() -> Any:
    try:
        import z3
    except ImportError:
        raise RuleError(
            "rules.prove needs the z3-solver package: pip install 'egraph-compiler[prove]'"
        ) from None
    return z3


def _check(
    rule: Rule, types: dict[str, str], attrs: dict[str, str], timeout: float
) -> tuple[Status, dict[str, Any]]:
    z3 = _z3()
    real = FAST_MATH in rule.tags and any(d in FLOAT_BITS for d in types.values())
    enc = Encoder(z3, types, attrs, real)
    root = _root_dtype(rule.lhs, types, attrs)
    (lhs, lhs_dtype), *left_flags = enc.flagged(lambda: enc.encode(rule.lhs, root))
    (rhs, rhs_dtype), *right_flags = enc.flagged(lambda: enc.encode(rule.rhs, lhs_dtype))
    if lhs_dtype != rhs_dtype:
        why = f"the sides have dtypes {lhs_dtype} and {rhs_dtype}"
        return "refuted", {"why": why, "values": {}}
    nsz = NSZ in rule.tags
    agree = enc.agree((lhs, *left_flags), (rhs, *right_flags), lhs_dtype, nsz)
    solver = z3.Solver()
    solver.set("timeout", int(timeout * 1000))
    solver.add(*_value_guards(rule, enc), z3.Not(agree))
    answer = solver.check()
    if answer == z3.unsat:
        return "proven", {"opaque": enc.opaque}
    if answer != z3.sat:
        return "unknown", {"why": f"the solver gave up ({solver.reason_unknown()})"}
    values = {name: enc.value(solver.model(), name) for name in enc.variables}
    if enc.opaque:  # the difference may come from what the solver chose for them
        why = f"a counterexample that leans on {', '.join(sorted(enc.opaque))} (not modelled)"
        if real or _confirm(rule, types, attrs, values) is None:
            return "unknown", {"why": why}
    confirmed = _confirm(rule, types, attrs, values)
    if confirmed is None:  # over the reals: infinities and NaN are modelled coarsely
        why = "the solver's counterexample does not reproduce in the interpreter"
        return "unknown", {"why": why}
    return "refuted", {"why": confirmed, "values": values}


VALUE_GUARD = re.compile(r"^(min|max|value) \( \?(\w+) \) (>=|<=|==|!=|>|<) (-?[0-9.eE+-]+)$")
COMPARE = {">": "greater", ">=": "greater_equal", "<": "less", "<=": "less_equal",
           "==": "equal", "!=": "not_equal"}  # fmt: skip


def _value_guards(rule: Rule, enc: Encoder) -> list[Any]:
    """Guards on a variable's values (`min(?k) > 0`, `value(?e) == 1`) as hypotheses: a
    scalar is its own min, max and value. Others that read values are checked on a
    counterexample instead."""
    out = []
    for guard in rule.guards:
        m = VALUE_GUARD.match(guard.text)
        if m is None or m.group(2) not in enc.variables:
            continue
        dtype = enc.types[m.group(2)]
        value = float(m.group(4))
        if dtype == "bool" or (dtype not in FLOAT_BITS and not value.is_integer()):
            continue  # left to the counterexample's check
        bound = enc.constant(value, dtype)
        out.append(enc.compare(COMPARE[m.group(3)], enc.variables[m.group(2)], bound, dtype))
    return out


def _root_dtype(p: Pattern, types: dict[str, str], attrs: dict[str, str]) -> str:
    """The dtype a literal at the root takes: its sibling variables'."""
    for dtype in types.values():
        if dtype != "bool":
            return dtype
    return next(iter(types.values()), "float32")


# ---------------------------------------------------------------- the interpreter's word
def _confirm(
    rule: Rule, types: dict[str, str], attrs: dict[str, str], values: dict[str, Any]
) -> str | None:
    """Run both sides on the counterexample: how they differ, or None where they agree
    there (or a value-reading guard does not hold on it)."""
    consts = {n: np.asarray(v, dtype=numpy_dtype(types[n])) for n, v in values.items()}
    match = Match({n: TensorType((), d) for n, d in types.items()}, attrs, consts)
    try:
        if not all(g(match) for g in rule.guards):
            return None
        root = _root_dtype(rule.lhs, types, attrs)
        left = _evaluate(rule.lhs, consts, attrs, root)
        right = _evaluate(rule.rhs, consts, attrs, root)
    except (CompilerError, ValueError, KeyError) as exc:
        return f"the interpreter refuses one side ({exc})"
    if same_values(left, right, NSZ in rule.tags):
        return None
    return f"left gives {show(left)}, right gives {show(right)}"


def _evaluate(p: Pattern, consts: dict[str, np.ndarray], attrs: dict[str, str], dtype: str) -> Any:
    bound = {n: Constant(np.asarray(v)) for n, v in consts.items()}
    return evaluate_side(p, bound, attrs, dtype)


def _build(p: Pattern, consts: dict[str, np.ndarray], attrs: dict[str, str], dtype: str) -> Expr:
    """A side over these values, as the e-graph builds it (bindings.instantiate)."""
    bound = {n: Constant(np.asarray(v)) for n, v in consts.items()}
    return instantiate(p, bound, attrs, TensorType((), dtype))


__all__ = ["ProofReport", "ProofResult", "prove", "prove_rule"]
