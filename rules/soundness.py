"""Soundness by property testing: both sides of a rule must compute the same on any binding.

For each rule, hypothesis draws a structure (shapes, dtypes, attributes: see bindings.py)
under which the left side type-checks and the guards hold, then values for every tensor
variable. Values include IEEE edge cases — 0, -0.0, ±inf, NaN, huge, tiny and subnormal
numbers — unless the rule is tagged `fast-math` or `quantize`, which claim only real-number
equality (a `quantize` rule's integer results may differ by one quantum): then
values are finite, moderate (|x| <= 4) and normal (fast-math code flushes subnormals), so
rounding differences stay within tolerance, and a binding whose left side holds an
infinity (a division by zero) proves nothing.
Both sides are evaluated with the reference interpreter and compared with the dtype's
tolerance (egraph_ir.compare.TOLERANCES); NaN must meet NaN, infinities must match in sign,
and the sign of a zero must match too (numpy's signed zeros are promised: 1/x tells them
apart) unless the rule is tagged `nsz` or `fast-math`. For a fast-math rule, a
float16/float32 difference is re-checked in float64: only real-number inequality counts.
A difference in type is a failure too. Hypothesis shrinks the first failure, which the
report prints with both outputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.extra.numpy import arrays, from_dtype

from egraph_ir.compare import leaves, mismatch
from egraph_ir.egraph import Match
from egraph_ir.egraph.pattern import Pattern
from egraph_ir.errors import CompilerError
from egraph_ir.expr import Constant, Expr, Function
from egraph_ir.infer import infer_type
from egraph_ir.interp import interpret
from egraph_ir.types import FLOAT_DTYPES, TensorType

from .bindings import DTYPES, Structure, build_lhs, draw_structure, instantiate
from .rule import FAST_MATH, NSZ, QUANTIZE, Rule, RuleSet

FINITE_BOUND = 4.0


@dataclass(frozen=True)
class SoundnessFailure:
    """A rule whose two sides differ on a binding (the shrunk counterexample)."""

    rule: str
    location: str
    problem: str
    bindings: dict[str, np.ndarray]
    attrs: dict[str, Any]
    lhs_output: Any = None
    rhs_output: Any = None
    drawn: dict[str, Any] = field(default_factory=dict)  # attributes the rule leaves unwritten

    def __str__(self) -> str:
        lines = [f"{self.location}: rule '{self.rule}' is unsound: {self.problem}"]
        for name, value in self.bindings.items():
            lines.append(f"    ?{name}: {value.dtype}{list(value.shape)} = {_show(value)}")
        for name, value in self.attrs.items():
            lines.append(f"    ?{name} = {value!r}")
        for name, value in self.drawn.items():
            lines.append(f"    {name} = {value!r}  (not written in the rule: drawn)")
        if self.lhs_output is not None or self.rhs_output is not None:
            lines.append(f"    left gives  {_show(self.lhs_output)}")
            lines.append(f"    right gives {_show(self.rhs_output)}")
        return "\n".join(lines)


@dataclass
class SoundnessReport:
    """The outcome over a set of rules: failures, and rules no binding could be made for."""

    checked: list[str] = field(default_factory=list)
    failures: list[SoundnessFailure] = field(default_factory=list)
    unchecked: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def failed(self) -> list[str]:
        return [f.rule for f in self.failures]

    def __str__(self) -> str:
        head = (
            f"{len(self.checked)} rule(s) checked, {len(self.failures)} unsound, "
            f"{len(self.unchecked)} without a valid binding"
        )
        parts = [head, *(str(f) for f in self.failures)]
        parts += [f"{name}: not checked: {why}" for name, why in self.unchecked.items()]
        return "\n".join(parts)


class _Unsound(Exception):
    def __init__(self, problem: str, bindings: dict, s: Structure, lhs: Any, rhs: Any) -> None:
        super().__init__(problem)
        self.problem, self.bindings, self.lhs, self.rhs = problem, bindings, lhs, rhs
        self.attrs = dict(s.attrs)
        self.drawn = {name: value for (_, name), value in s.wildcards.items()}


def check_soundness(
    rule_or_set: Rule | RuleSet | Iterable[Rule], max_examples: int | None = None, seed: int = 0
) -> SoundnessReport:
    """Check every rule with up to max_examples random bindings (default: the active
    hypothesis profile's max_examples); the same seed gives the same report."""
    if max_examples is None:
        max_examples = settings().max_examples  # the active profile's
    rule_list = [rule_or_set] if isinstance(rule_or_set, Rule) else list(rule_or_set)
    report = SoundnessReport()
    for rule in rule_list:
        report.checked.append(rule.name)
        outcome = _check_rule(rule, max_examples, seed)
        if isinstance(outcome, SoundnessFailure):
            report.failures.append(outcome)
        elif outcome is not None:
            report.unchecked[rule.name] = outcome
    return report


def _check_rule(rule: Rule, max_examples: int, seed: int) -> SoundnessFailure | str | None:
    finite = bool({FAST_MATH, QUANTIZE} & set(rule.tags))
    sides: list[Pattern] = [rule.lhs, rule.rhs] if rule.bidirectional else [rule.lhs]
    made = [0]
    probes = (np.random.default_rng(seed + i) for i in range(len(sides) * 3))
    if not any(draw_structure(rule, sides[i % len(sides)], rng) for i, rng in enumerate(probes)):
        return "no binding satisfies the types and guards"
    ill_typed = _typing_sweep(rule, sides, seed)
    if ill_typed is not None:
        return ill_typed

    @hypothesis_seed(seed)
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate, Phase.shrink),
    )
    @given(st.data())
    def prop(data: st.DataObject) -> None:
        side = sides[data.draw(st.integers(0, len(sides) - 1), label="side")]
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="structure"))
        s = draw_structure(rule, side, rng)
        if s is None:
            reject()
        values = _draw_values(data, s, finite, rng)
        _apply_value_hints(rule, s, values)
        if not _guards_hold(rule, s, values):
            reject()
        made[0] += 1
        other = rule.rhs if side is rule.lhs else rule.lhs
        _compare(rule, side, other, s, values)

    try:
        prop()
    except _Unsound as u:
        return SoundnessFailure(
            rule.name, rule.location, u.problem, u.bindings, u.attrs, u.lhs, u.rhs, u.drawn
        )
    except Unsatisfiable:
        return "no binding satisfies the types and guards"
    if made[0] == 0:
        return "no binding satisfies the types and guards"
    return None


SWEPT_DTYPES = (*FLOAT_DTYPES[:3], "bfloat16", "int8", "uint8", "int32", "int64", "bool")


def _typing_sweep(rule: Rule, sides: list[Pattern], seed: int) -> SoundnessFailure | None:
    """Does the other side type wherever a side does, in every common dtype? Random
    draws seldom pick a storage-only float (bfloat16), where ops such as sum are
    undefined, so each dtype is tried once on purpose."""
    for dtype in SWEPT_DTYPES:
        for side in sides:
            s = draw_structure(rule, side, np.random.default_rng(seed), tries=20, dtype=dtype)
            if s is None:
                continue
            values = {name: np.ones(t.shape, t.dtype) for name, t in s.types.items()}
            _apply_value_hints(rule, s, values)
            if not _guards_hold(rule, s, values):
                continue
            lhs_type = infer_type(build_lhs(rule, side, s, values)).checked_type
            consts = {name: Constant(v) for name, v in values.items()}
            other = rule.rhs if side is rule.lhs else rule.lhs
            try:
                infer_type(instantiate(other, consts, s.attrs, lhs_type))
            except CompilerError as exc:
                problem = f"the other side is ill-typed in {dtype}: {exc}"
                return SoundnessFailure(
                    rule.name, rule.location, problem, values, dict(s.attrs), None, None, {}
                )
    return None


# Magnitudes that break wrong rules: cancellation (1 + 2**60 - 2**60), overflow, underflow.
POOL_FLOATS = (
    *(0.0, -0.0, 1.0, 0.5, 3.0, 2.0**24, 2.0**60, 1e-30, 1e-45, np.inf, np.nan, 3e38),
    *(2.0**64, 2.0**-70, 65504.0),  # a product of two overflows float32 / underflows; f16 max
)
POOL_INTS = (0, 1, 2, 3)


def _draw_values(
    data: st.DataObject, s: Structure, finite: bool, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Most of the time every element comes from one small shared pool of magnitudes (with
    random signs), so equal, opposite and wildly different values meet across variables;
    otherwise elements are free hypothesis draws (with hypothesis' own edge cases)."""
    values = {}
    if rng.random() < 0.75:
        source = (0.0, 1.0, 0.5, 3.0, 2.0) if finite else POOL_FLOATS
        pool = rng.choice(np.asarray(source), size=int(rng.integers(1, 4)))
        if not finite and rng.random() < 0.3:  # one small and one huge: cancellation
            pool = np.asarray([rng.choice([1.0, 0.5, 3.0]), rng.choice([2.0**24, 2.0**60, 3e38])])
        for name, t in s.types.items():
            values[name] = _pooled(rng, t.dtype, t.shape, pool, finite)
        return values
    for name, t in s.types.items():
        elements = _elements(t.dtype, finite)
        values[name] = data.draw(arrays(t.dtype, t.shape, elements=elements), name)
    return values


def _pooled(
    rng: np.random.Generator,
    dtype: str,
    shape: tuple[int, ...],
    pool: np.ndarray,
    finite: bool = False,
) -> np.ndarray:
    """Elements from the pool with random signs; integers mostly small, sometimes their
    type's extremes (never for a rule that claims only moderate values)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    signs = rng.choice([-1.0, 1.0], size=shape)
    if dt.kind == "f":
        with np.errstate(all="ignore"):
            return (rng.choice(pool, size=shape) * signs).astype(dt)
    info = np.iinfo(dt)
    small = rng.choice(np.asarray(POOL_INTS, dtype=np.int64), size=shape)
    edges = rng.choice(np.asarray([info.max, info.min, 0], dtype=np.int64), size=shape)
    out = np.where(
        rng.random(shape) < (1.0 if finite else 0.8), small * signs.astype(np.int64), edges
    )
    return np.clip(out, info.min, info.max).astype(dt)


def _width(dt: np.dtype) -> Literal[16, 32, 64]:
    return 16 if dt.itemsize == 2 else 32 if dt.itemsize == 4 else 64


def _elements(dtype: str, finite: bool) -> st.SearchStrategy:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        if finite:
            return st.floats(-FINITE_BOUND, FINITE_BOUND, width=_width(dt), allow_subnormal=False)
        return from_dtype(dt, allow_nan=True, allow_infinity=True, allow_subnormal=True)
    if dt.kind in "iu" and finite:
        low = 0 if dt.kind == "u" else -8
        return st.integers(low, 8)
    return from_dtype(dt)


def _apply_value_hints(rule: Rule, s: Structure, values: dict[str, np.ndarray]) -> None:
    for g in rule.guards:
        pins = ("value", "values", "min", "max", "min>", "max<")
        if g.target is not None and g.target[0] in pins and g.value:
            name = g.target[1]
            try:
                want = g.value(Match(s.types, s.attrs, values))
            except (KeyError, IndexError, TypeError):
                continue
            if want is None:
                continue
            v = values[name]
            if g.target[0] in ("value", "min", "max"):  # every element E satisfies each
                values[name] = np.full(v.shape, want, dtype=v.dtype)
            elif g.target[0] == "values":  # every element, in order (a per-channel scale)
                flat = np.asarray(want, dtype=v.dtype).reshape(-1)
                if flat.size in (1, v.size):
                    values[name] = np.broadcast_to(flat, (v.size,)).reshape(v.shape).copy()
            elif g.target[0] == "min>":  # every element above the bound
                values[name] = (np.abs(v) + max(want, 0) + 1).astype(v.dtype)
            elif g.target[0] == "max<":
                values[name] = (-np.abs(v) + min(want, 0) - 1).astype(v.dtype)


def _guards_hold(rule: Rule, s: Structure, values: dict[str, np.ndarray]) -> bool:
    try:
        return all(g(Match(s.types, s.attrs, values)) for g in rule.guards)
    except (KeyError, IndexError, TypeError, ValueError):
        return False


def _compare(
    rule: Rule, side: Pattern, other: Pattern, s: Structure, values: dict[str, np.ndarray]
) -> None:
    lhs = build_lhs(rule, side, s, values)
    lhs_type = infer_type(lhs).checked_type
    consts = {name: Constant(v) for name, v in values.items()}
    try:
        rhs = instantiate(other, consts, s.attrs, lhs_type)
        rhs_type = infer_type(rhs).checked_type
    except CompilerError as exc:
        ill_typed = f"the other side is ill-typed here: {exc}"
        raise _Unsound(ill_typed, values, s, None, None) from None
    if rhs_type != lhs_type:
        raise _Unsound(f"the type changes from {lhs_type} to {rhs_type}", values, s, None, None)
    left, right = _run(lhs), _run(rhs)
    problem = mismatch(left, right)
    if problem and QUANTIZE in rule.tags and _within_one_quantum(left, right):
        return  # the float chain rounds on the way, the integer one once
    if problem and FAST_MATH in rule.tags and _has_infinity(left):
        return  # the original divided by zero or overflowed: fast-math promises nothing
    if problem and FAST_MATH in rule.tags and _promotable(s):
        # fast-math claims real-number equality: rounding of a low precision is not a bug
        wide = _promote(s)
        wide_values = {n: v.astype(wide.types[n].dtype) for n, v in values.items()}
        wide_lhs = build_lhs(rule, side, wide, wide_values)
        wide_consts = {n: Constant(v) for n, v in wide_values.items()}
        wide_root = infer_type(wide_lhs).checked_type
        wide_rhs = instantiate(other, wide_consts, wide.attrs, wide_root)
        infer_type(wide_rhs)
        if mismatch(_run(wide_lhs), _run(wide_rhs)) is None:
            return
    if not problem and not {FAST_MATH, NSZ} & set(rule.tags):
        problem = mismatch(left, right, signed_zeros=True)
        if problem:
            problem += "; tag the rule nsz if it may change it"
    if problem:
        raise _Unsound(problem, values, s, left, right)


def _within_one_quantum(left: Any, right: Any) -> bool:
    """Integer results no more than one apart everywhere (a `quantize` rule's promise)."""
    pairs = list(zip(leaves(left), leaves(right), strict=True))
    return all(
        np.asarray(a).dtype.kind in "iu"
        and np.asarray(a).shape == np.asarray(b).shape
        and int(np.max(np.abs(np.asarray(a, np.int64) - np.asarray(b, np.int64)), initial=0)) <= 1
        for a, b in pairs
    )


def _has_infinity(result: Any) -> bool:
    return any(np.asarray(x).dtype.kind in "fc" and np.isinf(x).any() for x in leaves(result))


def _run(e: Expr) -> Any:
    with np.errstate(all="ignore"):
        return interpret(Function((), e))


def _promotable(s: Structure) -> bool:
    """Float bindings can be widened to float64 when no attribute names a dtype."""
    narrow = any(t.dtype in ("float16", "float32") for t in s.types.values())
    names_dtype = any(isinstance(v, str) and v in DTYPES for v in s.attrs.values())
    names_dtype |= any(isinstance(v, str) and v in DTYPES for v in s.wildcards.values())
    return narrow and not names_dtype


def _promote(s: Structure) -> Structure:
    def widen(dtype: str) -> str:
        return "float64" if dtype in ("float16", "float32") else dtype

    return Structure(
        widen(s.dtype),
        {n: TensorType(t.shape, widen(t.dtype)) for n, t in s.types.items()},
        dict(s.attrs),
        dict(s.wildcards),
        {k: widen(d) for k, d in s.literal_dtypes.items()},
    )


def _show(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, tuple):
        return "(" + ", ".join(_show(x) for x in v) + ")"
    a = np.asarray(v)
    flat = np.array2string(  # every digit that tells two floats apart
        a.ravel(), threshold=12, floatmode="unique", separator=", ", max_line_width=200
    )
    return flat if a.ndim <= 1 else f"{flat} (flattened {list(a.shape)})"
