"""Equality saturation under limits, with a report (egg's Runner, rebuilt on egglog).

Each rewrite becomes an egglog rule whose only action records its bindings in a relation;
egglog does the matching. Python then reads the new matches, checks types and guards, builds
the right-hand sides and applies all unions in one batch. Because every union passes through
Python, the node limit and the time limit are checked between matches (no whole-iteration
overshoot), explosive rules are backed off, and a rewrite that would union terms of
different types is refused and reported with its location instead of corrupting the graph.
Small constants are folded with the numpy references after each iteration.
"""

from __future__ import annotations

import enum
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CompilerError, ConfigError
from ..expr import Constant
from ..registry import Op, ShapeError, get_op
from ..types import TensorType, TupleType, Type
from .encode import constant_key
from .extract import constant_of
from .graph import ENode, Snapshot, TensorEGraph, Value, ctor_op, decode_attr, encode_attr
from .pattern import (
    AttrVar,
    Match,
    PCall,
    PGet,
    PLit,
    PVar,
    Rewrite,
    attr_vars,
    resolve_attr,
    tensor_vars,
)

EXPENSIVE = "expensive"  # rules with this tag only run in the bounded explore phase
CHUNK = 2000  # queued actions between flushes: bounds limit overshoot and time between checks


class Stop(enum.Enum):
    """Why a saturation run ended: a fixpoint, or one of its limits."""

    SATURATED = "saturated"
    ITERATION_LIMIT = "iteration limit"
    NODE_LIMIT = "e-node limit"
    TIME_LIMIT = "time limit"


@dataclass(frozen=True)
class StopReason:
    """Why a run stopped and, for a limit, the limit it reached (iterations of the phase,
    e-nodes, seconds): "iteration limit (30)"."""

    kind: Stop
    limit: float | None = None

    def __str__(self) -> str:
        if self.limit is None:
            return self.kind.value
        unit = " s" if self.kind is Stop.TIME_LIMIT else ""
        return f"{self.kind.value} ({self.limit:g}{unit})"


SATURATED = StopReason(Stop.SATURATED)


@dataclass(frozen=True)
class Limits:
    """Bounds on one saturation run."""

    iterations: int = 30
    nodes: int = 100_000
    seconds: float = 10.0
    match_limit: int = 10_000  # per rule and iteration before back-off bans the rule
    ban_length: int = 2  # iterations a backed-off rule sits out (doubles each time)
    fold_max_elements: int = 1024  # constants folded inside the e-graph up to this size
    # layout ops (squeeze, reshape, expand_dims, transpose) of a constant folded up to this
    # size: placement raises it so that a predicate sees a rewritten weight as a constant
    fold_layout_elements: int = 1024
    explore_iterations: int = 2  # rounds of the expensive phase (rules tagged `expensive`)

    def __post_init__(self) -> None:
        """Every bound must bound: a NaN, infinite or negative limit would silently turn
        it off (a NaN time limit let an e-graph grow past 4 GB)."""
        for name in ("iterations", "nodes", "match_limit", "ban_length", "fold_max_elements",
                     "fold_layout_elements", "explore_iterations"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"limit {name} must be an integer >= 0, got {value!r}")
        if not (isinstance(self.seconds, int | float) and 0 < self.seconds < float("inf")):
            raise ConfigError(
                f"limit seconds must be a positive finite number, got {self.seconds!r}"
            )


@dataclass
class SaturationReport:
    """What a run did: matches and applications per rule, sizes, stop reason, time."""

    stop_reason: StopReason = SATURATED
    iterations: int = 0
    matches: Counter[str] = field(default_factory=Counter)
    applied: Counter[str] = field(default_factory=Counter)
    rejected_by_guard: Counter[str] = field(default_factory=Counter)
    unsound: dict[str, str] = field(default_factory=dict)  # rule -> first type conflict
    enodes_per_iteration: list[int] = field(default_factory=list)
    classes_per_iteration: list[int] = field(default_factory=list)
    seconds: float = 0.0
    folded: int = 0
    phases: list[tuple[str, int, float, str]] = field(default_factory=list)  # name, its, s, stop

    def summary(self) -> str:
        fired = ", ".join(f"{k} x{v}" for k, v in self.applied.most_common(8)) or "none"
        size = self.enodes_per_iteration[-1] if self.enodes_per_iteration else 0
        return (
            f"{self.iterations} iteration(s), stopped: {self.stop_reason}; "
            f"{size} e-nodes; {self.seconds * 1e3:.1f} ms; rules applied: {fired}"
        )


class _Stop(Exception):
    def __init__(self, reason: StopReason) -> None:
        self.reason = reason


class _CompiledRewrite:
    """A rewrite's egglog matching rule and its relation layout."""

    def __init__(self, rw: Rewrite, index: int, g: TensorEGraph) -> None:
        self.rw, self.relation, self.ruleset = rw, f"m{index}", f"rs{index}"
        g.run_text(f"(ruleset {self.ruleset})")
        self.tvars = tensor_vars(rw.lhs)
        self.avars = attr_vars(rw.lhs)
        self.literals: list[tuple[str, float]] = []
        self._wild = 0
        query = self._lhs(rw.lhs, g)
        cols = [
            "__root",
            *(f"t_{v}" for v in self.tvars),
            *(f"l_{i}" for i in range(len(self.literals))),
            *(f"a_{v}" for v in self.avars),
        ]
        sorts = ["T"] * (1 + len(self.tvars) + len(self.literals)) + ["String"] * len(self.avars)
        g.run_text(
            f"(relation {self.relation} ({' '.join(sorts)}))\n"
            f"(rule ((= __root {query})) (({self.relation} {' '.join(cols)})) "
            f':ruleset {self.ruleset} :name "{rw.name}")'
        )

    def _lhs(self, p: Any, g: TensorEGraph) -> str:
        if isinstance(p, PVar):
            return f"t_{p.name}"
        if isinstance(p, PLit):
            self.literals.append((f"l_{len(self.literals)}", p.value))
            return self.literals[-1][0]
        if isinstance(p, PGet):
            return f"(Get {self._lhs(p.tuple_value, g)} {p.index})"
        assert isinstance(p, PCall)
        op = get_op(p.op)
        given = p.attr_map()
        parts = [self._lhs(a, g) for a in p.args]
        for spec in op.attrs:
            value = given.get(spec.name)
            if isinstance(value, AttrVar):
                parts.append(f"a_{value.name}")
            elif spec.name in given:
                parts.append(f'"{encode_attr(value)}"')
            else:
                self._wild += 1
                parts.append(f"_w{self._wild}")
        return f"({g.op_ctor(op, len(p.args))} {' '.join(parts)})"


class Saturator:
    """Runs a set of rewrites over a TensorEGraph."""

    def __init__(
        self, g: TensorEGraph, rewrites: list[Rewrite], limits: Limits, fold_constants: bool = True
    ) -> None:
        self.g, self.limits, self.fold_constants = g, limits, fold_constants
        self.rules = [_CompiledRewrite(rw, i, g) for i, rw in enumerate(rewrites)]
        self.seen: set[tuple[str, tuple[Value, ...]]] = set()
        self.banned_until: dict[str, int] = {}
        self.ban_count: Counter[str] = Counter()
        self.seen_fold: set[tuple[str, Value]] = set()
        self.rejected: set[tuple[str, tuple[Value, ...]]] = set()
        self.report = SaturationReport()

    # ---------------------------------------------------------------- driver
    def run(self) -> SaturationReport:
        """Phases: cheap rules to saturation, then all rules (including those tagged
        `expensive`) for a few rounds, then the cheap rules again. Without expensive rules
        there is one phase."""
        rep, lim = self.report, self.limits
        start = time.perf_counter()
        self.deadline = start + lim.seconds
        cheap = [i for i, r in enumerate(self.rules) if EXPENSIVE not in r.rw.tags]
        phases = [("saturate", list(range(len(self.rules))), lim.iterations)]
        if len(cheap) < len(self.rules):
            everything = list(range(len(self.rules)))
            phases = [
                ("simplify", cheap, lim.iterations),
                ("explore", everything, lim.explore_iterations),
                ("simplify", cheap, lim.iterations),
            ]
        snap = self.g.snapshot()
        rep.enodes_per_iteration.append(snap.num_enodes)
        rep.classes_per_iteration.append(snap.num_classes)
        try:
            for name, active, iterations in phases:
                t0 = time.perf_counter()
                before = rep.iterations
                reason = self._phase(active, iterations)
                rep.phases.append(
                    (name, rep.iterations - before, time.perf_counter() - t0, reason.kind.value)
                )
                rep.stop_reason = reason
        except _Stop as stop:
            self.g.flush()
            rep.stop_reason = stop.reason
            rep.enodes_per_iteration.append(self.g.count_enodes())
        except BaseException as exc:  # egglog panics are BaseExceptions: report, don't crash
            if isinstance(exc, KeyboardInterrupt | SystemExit | CompilerError):
                raise
            raise CompilerError(f"e-graph failure during saturation: {exc}") from exc
        rep.seconds = time.perf_counter() - start
        return rep

    def _phase(self, active: list[int], iterations: int) -> StopReason:
        rep, lim = self.report, self.limits
        rules = [self.rules[i] for i in active]
        if not rules and not self.fold_constants:
            return SATURATED
        schedule = " ".join(f"(run {r.ruleset})" for r in rules)
        for _ in range(iterations):
            it = rep.iterations
            rep.iterations += 1
            self._check_time()
            if schedule:
                self.g.run_text(f"(run-schedule (seq {schedule}))")
            snap = self.g.snapshot(tuple(r.relation for r in rules))
            self._apply_matches(snap, it, rules)
            self.g.flush()
            after = self.g.snapshot()
            for _ in range(8 if self.fold_constants else 0):  # fold chains of constants
                if not self._fold(after):
                    break
                self.g.flush()
                after = self.g.snapshot()
            grew = (after.num_enodes, after.num_classes) != (snap.num_enodes, snap.num_classes)
            rep.enodes_per_iteration.append(after.num_enodes)
            rep.classes_per_iteration.append(after.num_classes)
            if after.num_enodes > lim.nodes:
                raise _Stop(StopReason(Stop.NODE_LIMIT, self.limits.nodes))
            if not grew and not any(u > it for u in self.banned_until.values()):
                return SATURATED
        return StopReason(Stop.ITERATION_LIMIT, iterations)

    def _check_time(self) -> None:
        if time.perf_counter() > self.deadline:
            raise _Stop(StopReason(Stop.TIME_LIMIT, self.limits.seconds))

    # ---------------------------------------------------------------- rule application
    def _apply_matches(self, snap: Snapshot, it: int, rules: list[_CompiledRewrite]) -> int:
        rep, lim = self.report, self.limits
        applied = 0
        size = snap.num_enodes
        for rule in rules:
            name = rule.rw.name
            rows = [r for r in snap.relations.get(rule.relation, ()) if (name, r) not in self.seen]
            if not rows:
                continue
            if self.banned_until.get(name, -1) > it:
                continue
            rep.matches[name] += len(rows)
            if len(rows) > lim.match_limit:  # back off: apply a share now, ban for a while
                self.ban_count[name] += 1
                self.banned_until[name] = it + lim.ban_length * 2 ** (self.ban_count[name] - 1)
                rows = rows[: lim.match_limit]
            for k, row in enumerate(rows):
                if k % 128 == 0:
                    self._check_time()
                added = self._apply_one(rule, row, snap)
                if added >= 0:  # a guard that failed may hold later (a class may become constant)
                    self.seen.add((name, row))
                applied += added > 0
                if size + self.g.pending >= lim.nodes or self.g.pending >= CHUNK:
                    # queued terms over-count (egglog shares equal terms): flush and count
                    self.g.flush()
                    self._check_time()
                    size = self.g.count_enodes()
                    if size >= lim.nodes:
                        raise _Stop(StopReason(Stop.NODE_LIMIT, self.limits.nodes))
        return applied

    def _apply_one(self, rule: _CompiledRewrite, row: tuple[Value, ...], snap: Snapshot) -> int:
        """Check and apply one match: the number of e-nodes queued, 0 if refused for good,
        -1 if refused for now (a guard or literal that may hold once constants fold)."""
        rw, rep, g = rule.rw, self.report, self.g
        root, rest = row[0], row[1:]
        tclasses = dict(zip(rule.tvars, rest, strict=False))
        lit_classes = rest[len(rule.tvars) : len(rule.tvars) + len(rule.literals)]
        attr_vals = {
            v: decode_attr(g.string(s))
            for v, s in zip(rule.avars, rest[len(rule.tvars) + len(rule.literals) :], strict=True)
        }
        for (_, value), c in zip(rule.literals, lit_classes, strict=True):
            const = constant_of(g, snap, c)
            if const is None:
                return -1  # may be folded into a constant later
            if not np.all(const.data == value):
                return 0
        types = {v: self._type(snap, c) for v, c in tclasses.items()}
        consts = {
            v: const.data
            for v, c in tclasses.items()
            if (const := constant_of(g, snap, c)) is not None
        }
        if rw.guard is not None:
            try:
                ok = rw.guard(Match(types, attr_vals, consts))
            except (MemoryError, RecursionError) as exc:  # the machine failed, not the guard
                raise CompilerError(
                    f"rule '{rw.name}' ({rw.location}): its guard raised {type(exc).__name__}"
                ) from exc
            except Exception as exc:  # a guard that cannot be evaluated does not hold
                ok = False
                rep.rejected_by_guard[f"{rw.name} (error: {exc})"] += 1
            if not ok:
                if (rw.name, row) not in self.rejected:
                    self.rejected.add((rw.name, row))
                    rep.rejected_by_guard[rw.name] += 1
                return -1
        root_type = self._type(snap, root)
        handles = {v: min(snap.class_handles[c]) for v, c in tclasses.items()}
        queued: list[tuple[str, Type]] = []
        try:
            match = Match(types, attr_vals, consts)
            term, ty = self._build(rw.rhs, handles, match, root_type, queued)
        except (ShapeError, CompilerError, ValueError, TypeError) as exc:
            rep.unsound.setdefault(rw.name, f"{rw.location}: right-hand side is ill-typed: {exc}")
            return 0
        if ty != root_type:
            rep.unsound.setdefault(
                rw.name, f"{rw.location}: rule '{rw.name}' would union {root_type} with {ty}"
            )
            return 0
        root_handle = min(snap.class_handles[root])
        if isinstance(term, int):
            if snap.handle_class.get(term) == root:
                return 0  # already the same class
            g.union(root_handle, term)
        else:
            g.union(root_handle, g.add(term, ty))
        rep.applied[rw.name] += 1
        return len(queued) + 1

    def _type(self, snap: Snapshot, c: Value) -> Type:
        return self.g.handle_types[min(snap.class_handles[c])]

    def _build(
        self,
        p: Any,
        handles: dict[str, int],
        match: Match,
        root_type: Type,
        queued: list[tuple[str, Type]],
    ) -> tuple[str | int, Type]:
        """The RHS as a term over handles; new inner nodes get handles (for their types)."""
        g = self.g
        if isinstance(p, PVar) and p.name not in handles:  # an attribute value used as a scalar
            p = PLit(float(match.attrs[p.name]))
        if isinstance(p, PVar):
            return handles[p.name], match.types[p.name]
        if isinstance(p, PGet):
            term, t = self._build(p.tuple_value, handles, match, root_type, queued)
            if not isinstance(t, TupleType) or not 0 <= p.index < len(t.fields):
                raise ShapeError(f"field {p.index} of {t}")
            ref = f"(H {term})" if isinstance(term, int) else f"(H {g.add(term, t)})"
            if not isinstance(term, int):
                queued.append((str(term), t))
            return f"(Get {ref} {p.index})", t.fields[p.index]
        if isinstance(p, PLit):
            dtype = root_type.dtype if isinstance(root_type, TensorType) else "float32"
            c = Constant(np.asarray(p.value, dtype=dtype))
            key = constant_key(c)
            g.constants.setdefault(key, c)
            return f'(Const "{key}")', TensorType((), dtype)
        assert isinstance(p, PCall)
        op = get_op(p.op)
        kids = [self._build(a, handles, match, root_type, queued) for a in p.args]
        given = {k: resolve_attr(v, match) for k, v in p.attrs}
        norm = op.normalize_attrs(given, len(kids))
        kid_types = [t for _, t in kids]
        for t in kid_types:
            if not isinstance(t, TensorType):
                raise ShapeError(f"{op.name} takes tensors, got {t}")
        ty = op.infer(kid_types, norm)  # type: ignore[arg-type]
        refs = []
        for term, t in kids:
            if isinstance(term, int):
                refs.append(f"(H {term})")
            else:
                h = g.add(term, t)
                queued.append((term, t))
                refs.append(f"(H {h})")
        lits = [f'"{encode_attr(norm[a.name])}"' for a in op.attrs]
        return f"({g.op_ctor(op, len(kids))} {' '.join(refs + lits)})", ty

    # ---------------------------------------------------------------- constant folding
    def _fold(self, snap: Snapshot) -> int:
        """Evaluate op nodes whose children are all small constants; union with the result."""
        g, lim = self.g, self.limits
        folded = 0
        for n in snap.nodes:
            if not n.ctor.startswith("op_") or (n.ctor, n.eclass) in self.seen_fold:
                continue
            if constant_of(g, snap, n.eclass) is not None:
                continue
            kids = [constant_of(g, snap, c) for c in n.children]
            if any(k is None for k in kids):
                continue
            out_type = self._type(snap, n.eclass)
            layout = ctor_op(n.ctor).name in LAYOUT_OPS
            limit = (
                max(lim.fold_layout_elements, lim.fold_max_elements)
                if layout
                else lim.fold_max_elements
            )
            if not isinstance(out_type, TensorType) or not out_type.is_static:
                continue  # sizes known when the program runs are not folded
            if out_type.size > limit:
                continue
            self.seen_fold.add((n.ctor, n.eclass))
            value = _evaluate(n, [k.data for k in kids if k is not None])
            if value is None:
                continue
            c = Constant(value)
            key = constant_key(c)
            g.constants.setdefault(key, c)
            g.union(min(snap.class_handles[n.eclass]), g.add(f'(Const "{key}")', out_type))
            folded += 1
        self.report.folded += folded
        if folded:
            self.report.applied["fold-constant"] += folded
        return folded


# ops that only move a constant's elements (no arithmetic), folded up to
# Limits.fold_layout_elements
LAYOUT_OPS = frozenset({"squeeze", "reshape", "expand_dims", "transpose"})


def _evaluate(n: ENode, args: list[np.ndarray]) -> np.ndarray | None:
    op: Op = ctor_op(n.ctor)
    if op.annotation or not op.foldable:  # markers and dequantized weights stay
        return None
    attrs = {a.name: decode_attr(s) for a, s in zip(op.attrs, n.literals, strict=True)}
    try:
        out = op.evaluate(args, attrs)  # type: ignore[arg-type]
    except Exception:
        return None
    return out if isinstance(out, np.ndarray) else None


def saturate(
    g: TensorEGraph,
    rewrites: list[Rewrite],
    limits: Limits | None = None,
    fold_constants: bool = True,
) -> SaturationReport:
    """Run rewrites over g until saturation or a limit; see the module docstring."""
    return Saturator(g, rewrites, limits or Limits(), fold_constants).run()
