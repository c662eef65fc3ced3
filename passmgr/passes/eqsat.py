"""EqSat: optimise each function by equality saturation over rule files, then extraction.

The standard rule-based passes (SimplifyInference, AlgebraicSimplify, FoldScaleAxis,
CastCanonicalize) are EqSat over a built-in rule file, so TVM-style pipelines and
`disabled_pass` work with them. Limits come from the pass's options or, when unset, from the
PassContext config (`eqsat.node_limit`, `eqsat.iter_limit`, `eqsat.time_limit_s`,
`eqsat.fast_math`, `eqsat.extract_time_limit_s`). Extraction uses `extractor` (greedy,
greedy-dag, ilp, auto) under `cost_model` (nodes, flops, balanced — the default —, roofline,
or a callable). A function is only replaced when the extracted program is not more
expensive than the original under the same cost model (both DAG costs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import rules as rules_lib
from egraph_ir.egraph import (
    EXTRACTORS,
    CostModel,
    Limits,
    OptimizeResult,
    StopReason,
    get_cost_model,
    optimize,
)
from egraph_ir.egraph.encode import merge_equal
from egraph_ir.egraph.graph import ENode
from egraph_ir.egraph.pattern import PCall, PGet, PLit, Rewrite
from egraph_ir.errors import ConfigError
from egraph_ir.expr import Call, Constant, Expr, Function, TupleGetItem
from egraph_ir.module import IRModule
from egraph_ir.registry import Op
from egraph_ir.types import Type
from egraph_ir.visitor import post_order
from rules import RuleSet

from ..config import register_config
from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record

log = logging.getLogger(__name__)

register_config("eqsat.node_limit", int, 100_000, "stop saturating past this many e-nodes")
register_config("eqsat.iter_limit", int, 30, "stop after this many iterations")
register_config("eqsat.time_limit_s", float, 10.0, "stop after this many seconds")
register_config("eqsat.fast_math", bool, False, "also run rules tagged fast-math")
register_config(
    "eqsat.attribution", bool, False,
    "each applied rule's share of the cost change (one more saturation per rule, without it)",
)  # fmt: skip
register_config(
    "eqsat.extract_time_limit_s", float, 2.0, "seconds extraction may take (every extractor)"
)


def resolve_rules(spec: str | RuleSet) -> RuleSet:
    """A RuleSet, a built-in name, a path to a .rules file, or several joined with '+'.
    "none" (or an empty string) is the empty set: saturation then only hash-conses."""
    if isinstance(spec, RuleSet):
        return spec
    total = RuleSet()
    for part in spec.split("+"):
        part = part.strip()
        if part in ("", "none"):
            continue
        if part.endswith(".rules") or "/" in part:
            total = total + rules_lib.load(Path(part))
        else:
            total = total + rules_lib.builtin(part)
    return total


AVOID_PENALTY = 1e15


def avoiding(model: CostModel, ops: tuple[str, ...]) -> CostModel:
    """The model, with a prohibitive price on the given ops (lowering passes)."""
    if not ops:
        return model
    ctors = {f"op_{o}" for o in ops}

    def cost(node: ENode, child_types: list[Type], out_type: Type) -> float:
        base = model(node, child_types, out_type)
        return base + AVOID_PENALTY if node.ctor in ctors else base

    return cost


@register_pass
@dataclass(frozen=True)
class EqSat(FunctionPass):
    """Saturate with `rules` (see resolve_rules), then extract the cheapest program."""

    rules: str | RuleSet = "algebraic"
    node_limit: int | None = None
    iter_limit: int | None = None
    time_limit_s: float | None = None
    fast_math: bool | None = None
    extractor: str = "auto"
    cost_model: str | CostModel = "balanced"
    fold_constants: bool = True
    avoid: tuple[str, ...] = ()  # ops extraction keeps only when nothing else computes the value
    extract_time_limit_s: float | None = None  # None: eqsat.extract_time_limit_s
    opt_level = 2
    required = ("InferType",)

    def __post_init__(self) -> None:
        if self.extractor not in EXTRACTORS:
            known = ", ".join(EXTRACTORS)
            raise ConfigError(f"unknown extractor '{self.extractor}'; known: {known}")
        get_cost_model(self.cost_model)  # unknown names fail when the pass is built
        resolve_rules(self.rules)  # bad names and files fail when the pass is built

    def limits(self, ctx: PassContext) -> Limits:
        def pick(value: object, key: str) -> object:
            return ctx.get_config(key) if value is None else value

        return Limits(
            iterations=int(pick(self.iter_limit, "eqsat.iter_limit")),  # type: ignore[call-overload]
            nodes=int(pick(self.node_limit, "eqsat.node_limit")),  # type: ignore[call-overload]
            seconds=float(pick(self.time_limit_s, "eqsat.time_limit_s")),  # type: ignore[arg-type]
        )

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        fast = self.fast_math if self.fast_math is not None else ctx.get_config("eqsat.fast_math")
        rule_set = resolve_rules(self.rules).enabled(bool(fast))
        rewrites = rule_set.rewrites()
        if not rewrites and not self.fold_constants:  # hash-consing alone: no e-graph needed
            body, merged = merge_equal(fn.body)
            record(EqSatReport(merged=merged))
            return fn if not merged else Function(fn.params, body, fn.ret_type, fn.attrs, fn.span)
        if rewrites and nothing_to_do(fn, rewrites, self.fold_constants):
            record(EqSatReport(skipped=True))
            return fn
        result = self._optimize(fn, rewrites, ctx)
        rep = result.report
        kept = result.cost_after > result.cost_before  # the input stays: nothing cheaper
        shares = {}
        if ctx.get_config("eqsat.attribution") and not kept:
            shares = attribution(fn, rule_set, result, lambda w: self._optimize(fn, w, ctx))
        out = fn if kept else result.function
        for name, why in rep.unsound.items():
            log.warning("rule %s refused where its two sides do not type alike: %s", name, why)
        extraction = result.extraction
        record(
            EqSatReport(
                stop_reason=rep.stop_reason,
                iterations=rep.iterations,
                enodes=max(rep.enodes_per_iteration),
                rules_applied=sum(rep.applied.values()),
                applied=dict(rep.applied),
                extractor=extraction.extractor if extraction is not None else "",
                status=extraction.status if extraction is not None else "",
                cost_before=_without(result.cost_before, fn, self.avoid),
                cost_after=_without(min(result.cost_after, result.cost_before), out, self.avoid),
                penalised_cost_before=result.cost_before,
                penalised_cost_after=min(result.cost_after, result.cost_before),
                refused=tuple(rep.unsound),
                seconds=rep.seconds,
                matches=dict(rep.matches),
                attribution=shares,
            )
        )
        log.info("%s: %s", self.info.name, rep.summary())
        return out

    def _optimize(self, fn: Function, rewrites: list[Rewrite], ctx: PassContext) -> OptimizeResult:
        """One saturation and extraction with this pass's limits, cost model and extractor."""
        return optimize(
            fn,
            rewrites,
            self.limits(ctx),
            cost_model=avoiding(get_cost_model(self.cost_model), self.avoid),
            fold_constants=self.fold_constants,
            extractor=self.extractor,
            extract_time_limit=float(
                ctx.get_config("eqsat.extract_time_limit_s")
                if self.extract_time_limit_s is None
                else self.extract_time_limit_s
            ),
        )


def attribution(
    fn: Function,
    rule_set: RuleSet,
    result: OptimizeResult,
    run: Callable[[list[Rewrite]], OptimizeResult],
) -> dict[str, float]:
    """Each applied rule's share of the cost change: the change the saturation without the
    rule misses, over the whole change (1.0: nothing else gets there; 0.0: other rules
    reach the same cost; shares of rules that need each other add up to more than 1)."""
    gained = result.cost_before - min(result.cost_after, result.cost_before)
    applied = {name.removesuffix("~rev") for name, n in result.report.applied.items() if n}
    shares: dict[str, float] = {}
    for name in sorted(applied):
        rest = [w for r in rule_set if r.name != name for w in r.rewrites()]
        without = run(rest)
        cost = min(without.cost_after, without.cost_before)
        shares[name] = (
            (cost - min(result.cost_after, result.cost_before)) / gained if gained else 0.0
        )
    return shares


@dataclass(frozen=True, slots=True)
class EqSatReport(PassReport):
    """One function's saturation and extraction. Costs are DAG costs under the pass's cost
    model; `cost_*` leave out the prohibitive price on `avoid` ops, `penalised_cost_*` are
    what the extractor compared. `skipped`: no rule could match, nothing ran; `merged`: the
    hash-consing-only run (no rules) merged that many equal computations."""

    stop_reason: StopReason | None = None  # None: the pass skipped the run
    iterations: int = 0
    enodes: int = 0
    rules_applied: int = 0
    applied: dict[str, int] = field(default_factory=dict)  # per rule
    extractor: str = ""
    status: str = ""  # "optimal", "feasible", "heuristic"
    cost_before: float = 0.0
    cost_after: float = 0.0
    penalised_cost_before: float = 0.0
    penalised_cost_after: float = 0.0
    refused: tuple[str, ...] = ()  # rules whose rewrite would have changed a type
    seconds: float = 0.0
    matches: dict[str, int] = field(default_factory=dict)  # per rule
    attribution: dict[str, float] = field(default_factory=dict)  # eqsat.attribution: shares
    skipped: bool = False
    merged: int = 0


def _without(cost: float, fn: Function, avoid: tuple[str, ...]) -> float:
    """cost less the penalty of each avoided op fn still computes (counted in fn itself)."""
    if not avoid:
        return cost
    names = set(avoid)
    count = sum(
        1
        for n in post_order(fn.body)
        if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name in names
    )
    return cost - count * AVOID_PENALTY


def _could_match(e: Expr, p: object) -> bool:
    """Whether e has p's shape: the same ops and projections, constants where literals
    are (attributes, guards and repeated variables ignored). Over-approximates a match in
    the e-graph before any rule fired, where each class holds just the program's nodes.
    Recurses over the pattern only (a few levels)."""
    if isinstance(p, PLit):
        return isinstance(e, Constant)
    if isinstance(p, PGet):
        return (
            isinstance(e, TupleGetItem)
            and e.index == p.index
            and _could_match(e.tuple_value, p.tuple_value)
        )
    if isinstance(p, PCall):
        return (
            isinstance(e, Call)
            and isinstance(e.op, Op)
            and e.op.name == p.op
            and len(e.args) == len(p.args)
            and all(_could_match(a, q) for a, q in zip(e.args, p.args, strict=True))
        )
    return True  # a variable


def nothing_to_do(fn: Function, rewrites: list[Rewrite], fold_constants: bool) -> bool:
    """No rule's left-hand side matches anywhere in the program and, when constants fold,
    no call has only constant arguments: then saturation cannot change the e-graph (every
    later match needs an earlier rewrite), so it would only cost time."""
    by_root: dict[str, list[Rewrite]] = {}
    for r in rewrites:
        key = r.lhs.op if isinstance(r.lhs, PCall) else "<get>"
        by_root.setdefault(key, []).append(r)
    for node in post_order(fn.body):
        if isinstance(node, Call) and isinstance(node.op, Op):
            if fold_constants and node.args and all(isinstance(a, Constant) for a in node.args):
                return False
            if any(_could_match(node, r.lhs) for r in by_root.get(node.op.name, ())):
                return False
        elif isinstance(node, TupleGetItem) and any(
            _could_match(node, r.lhs) for r in by_root.get("<get>", ())
        ):
            return False
    return True


@register_pass
@dataclass(frozen=True)
class SimplifyInference(EqSat):
    """Batch/layer/instance norm and l2_normalize into elementwise ops; dropout removed."""

    rules: str | RuleSet = "simplify_inference"
    fast_math: bool | None = True  # the rewritten norms are exact for finite values only
    avoid: tuple[str, ...] = (
        "batch_norm",
        "layer_norm",
        "instance_norm",
        "l2_normalize",
        "dropout",
    )
    opt_level = 0


@register_pass
@dataclass(frozen=True)
class FakeQuantizationToInteger(EqSat):
    """dequantize -> conv2d -> quantize chains as integer convolutions and a requantize
    (rules/builtin/quantize.rules; TVM's pass of this name): what ONNX Runtime computes for
    a QDQ model, bit for bit, where the float chain is one quantum off at times."""

    rules: str | RuleSet = "quantize"
    fast_math: bool | None = True  # the rules are tagged quantize, not fast-math: all run
    avoid: tuple[str, ...] = ("quantize",)  # a chain the rules cover leaves no float quantize
    opt_level = 0


@register_pass
@dataclass(frozen=True)
class AlgebraicSimplify(EqSat):
    """Identities, involutions, transpose/reshape canonicalisation (exact unless fast-math)."""

    rules: str | RuleSet = "algebraic+layout"
    opt_level = 1


@register_pass
@dataclass(frozen=True)
class FoldScaleAxis(EqSat):
    """Per-channel scales and shifts after conv2d folded into its weights and bias; the
    weight arithmetic is then folded by FoldConstant (required after it in pipelines)."""

    rules: str | RuleSet = "fold_scale_axis"
    fast_math: bool | None = True  # scales move into weights: exact for finite values only
    opt_level = 3

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        from .fold_constant import fold_constants

        return fold_constants(super().transform_function(fn, mod, ctx))


@register_pass
@dataclass(frozen=True)
class CastCanonicalize(EqSat):
    """Drop casts to the same dtype and exact round trips through wider dtypes."""

    rules: str | RuleSet = "cast"
    opt_level = 1


@register_pass
@dataclass(frozen=True)
class EliminateCommonSubexpr(EqSat):
    """Common-subexpression elimination: encoding into the e-graph hash-conses, so equal
    computations (same op, attributes and inputs; constants by value) come out once."""

    rules: str | RuleSet = "none"
    fold_constants: bool = False
    opt_level = 1
    idempotent = True
