"""PlaceTargets: every call on the target where the whole program costs least, chosen
exactly (an integer program) instead of AnnotateTarget's first-supporting-target rule.

The cost model is in model.py, its integer program in solve.py, the report
of what was chosen and why in report.py. The placement is then annotated, regions
merged (without cycles) and partitioned as by the rest of the flow. Functions with Let
or If are left to the host.

Two steps refine this: the function is also saturated with rules that expose offloads
and placed by one integer program over the e-graph (extract.py), kept when cheaper;
and a cost model that can measure has its answer checked against real runs of the
candidate placements (measured.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from egraph_ir.egraph import Limits, Rewrite
from egraph_ir.errors import ConfigError
from egraph_ir.expr import Call, Expr, Function, If, Let
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.support import list_targets
from egraph_ir.visitor import post_order
from rules import RuleSet

from ....config import register_config
from ....context import PassContext
from ....pass_base import ModulePass
from ....registry import register_pass
from ....run import PassReport, record
from ....sequential import Sequential
from ...eqsat import nothing_to_do, resolve_rules
from ..annotate_target import annotate_function, strip_annotations
from ..merge_regions import MergeCompilerRegions
from ..partition_graph import PartitionGraph
from ..regions import DEFAULT
from .extract import place_by_extraction
from .measured import Placed, choose_by_running
from .model import (
    PlacementCost,
    Plan,
    greedy_placement,
    is_composite,
    nominal_cost,
    placement_cost,
    problem_of,
    target_budget,
    target_links,
)
from .report import PlacementReport, report_host, report_regions
from .solve import TIME_LIMIT_S, solve

# flexible matching (see place_extract); "offload+layout" also cancels transposes
DEFAULT_RULES = "offload"

register_config(
    "placement.link_costs",
    dict,
    {},
    'cost per byte of a copy per target pair, {"default->blas": 1e-10}; copies take the '
    "cheapest route (PlaceTargets)",
    validate=target_links,
)
register_config(
    "placement.budget",
    dict,
    {},
    'bytes each target may hold, {"blas": 1_000_000}; over it, calls spill (PlaceTargets)',
    validate=target_budget,
)


def plan_placement(
    mod: IRModule,
    targets: Sequence[str],
    cost: PlacementCost,
    rewrites: Sequence[Rewrite] = (),
    limits: Limits | None = None,
) -> tuple[dict[str, Plan], PlacementReport]:
    """Per function that can be placed: its body without annotations (rewritten where the
    rewrites make a cheaper placement, see place_extract) and the cheapest placement of its
    calls; and the report. Functions with Let or If, primitive and external functions are
    left out (their calls stay on the host)."""
    plans: dict[str, Plan] = {}
    report = PlacementReport()
    for name, fn in infer_type(mod).items():
        if fn.attrs.get("Primitive") or fn.attrs.get("Compiler"):
            continue
        if any(isinstance(n, Let | If) for n in post_order(fn.body, into_functions=False)):
            continue  # control flow stays on the host
        body, _ = strip_annotations(fn.body)
        plain = fn if body is fn.body else Function(fn.params, body)
        given = problem = problem_of(plain, targets, cost)
        place = solve(problem, cost)
        placed_body = body
        report.greedy_cost += placement_cost(problem, greedy_placement(problem, targets), cost)
        flexible = rewrites and not any(is_composite(c) for c in problem.calls)
        if flexible and not nothing_to_do(plain, list(rewrites), fold_constants=True):
            found = place_by_extraction(
                plain, targets, cost, list(rewrites), limits or Limits(), TIME_LIMIT_S
            )
            if found is not None:  # the program it found, placed under the whole model
                rewritten = problem_of(found.function, targets, cost)
                place_rewritten = solve(rewritten, cost)
                if placement_cost(rewritten, place_rewritten, cost) < placement_cost(
                    problem, place, cost
                ):
                    problem, place = rewritten, place_rewritten
                    placed_body = found.function.body
                    report.rewritten += 1
        report.cost += placement_cost(problem, place, cost)
        report.regions += report_regions(problem, place, cost, placed_body)
        report.host += report_host(problem, place, cost)
        plans[name] = Plan(placed_body, problem, place, body, given)
    return plans, report


def partition_placed(mod: IRModule, placed: Placed, bind_constants: bool) -> IRModule:
    """mod with each named function's body placed as given ({call: target}; absent
    calls on the host), regions merged and partitioned."""
    functions = dict(mod.items())
    for name, (body, place) in placed.items():

        def choose(call: Call, place: Mapping[Expr, str] = place) -> str:
            return place.get(call, DEFAULT)

        functions[name] = annotate_function(functions[name], body, choose, True)
    merge = MergeCompilerRegions()
    partition = PartitionGraph(bind_constants=bind_constants)
    return Sequential([merge, partition])(IRModule(functions))


def placement_report(
    mod: IRModule,
    targets: Sequence[str],
    cost: PlacementCost,
    rules: str | RuleSet = DEFAULT_RULES,
) -> PlacementReport:
    """What PlaceTargets' cost model chooses for mod, and why (JSON: `.to_json()`); runs
    that overrule it (a cost model that can measure) are in the pass's PlacementChoice."""
    return plan_placement(mod, targets, cost, _rewrites(rules), Limits())[1]


def _rewrites(rules: str | RuleSet, fast_math: bool = True) -> list[Rewrite]:
    return resolve_rules(rules).enabled(fast_math).rewrites()


@register_pass
@dataclass(frozen=True)
class PlaceTargets(ModulePass):
    """Place calls on targets at least cost, then merge regions and partition (see the
    module docstring). Without targets: every registered one; without a cost model:
    `nominal_cost()`. It records a PlacementChoice (the run's report); the per-region
    report is `placement_report(mod, targets, cost)`."""

    targets: Sequence[str] = ()
    cost: PlacementCost | None = None
    links: Mapping[Any, float] | None = None  # replaces the cost's (config placement.link_costs)
    budget: Mapping[str, int] | None = None  # replaces the cost's (config placement.budget)
    bind_constants: bool = True
    rules: str | RuleSet = DEFAULT_RULES  # flexible matching; "none": place the program as is
    fast_math: bool = True  # also rules that sum in another order (a 1x1 conv as a product)
    required = ("InferType",)

    def __post_init__(self) -> None:
        targets = [self.targets] if isinstance(self.targets, str) else list(self.targets)
        if not all(isinstance(t, str) and t and t != DEFAULT for t in targets):
            raise ConfigError(f"PlaceTargets needs target names, got {self.targets!r}")
        if self.cost is not None and not isinstance(self.cost, PlacementCost):
            raise ConfigError(
                f"PlaceTargets' cost is a PlacementCost (cost_table), got {self.cost!r}"
            )
        object.__setattr__(self, "targets", tuple(targets) or tuple(list_targets()))
        object.__setattr__(self, "cost", self.cost or nominal_cost())
        self.with_tables(self.links, self.budget)  # bad tables fail when built
        _rewrites(self.rules, self.fast_math)  # bad names and files fail when built

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        cost = self.with_tables(
            self.links if self.links is not None else ctx.get_config("placement.link_costs"),
            self.budget if self.budget is not None else ctx.get_config("placement.budget"),
        )
        limits = Limits(
            iterations=int(ctx.get_config("eqsat.iter_limit")),
            nodes=int(ctx.get_config("eqsat.node_limit")),
            seconds=float(ctx.get_config("eqsat.time_limit_s")),
        )
        rewrites = _rewrites(self.rules, self.fast_math)
        plans, report = plan_placement(mod, self.targets, cost, rewrites, limits)
        placed: Placed = {name: (p.body, p.place) for name, p in plans.items()}
        choice = PlacementChoice(
            report.cost, report.greedy_cost, len(report.regions), report.rewritten
        )
        if cost.measure is not None:
            run = choose_by_running(mod, plans, self.targets, cost, self.partition)
            placed, choice = run.placed, choice.measured(run.chosen, run.ms, run.failed)
        record(choice)
        return self.partition(mod, placed)

    def with_tables(
        self, links: Mapping[Any, float] | None, budget: Mapping[str, int] | None
    ) -> PlacementCost:
        """The cost model with these link costs and budgets where given (non-empty)."""
        assert self.cost is not None
        cost = self.cost
        if links:
            cost = replace(cost, links=links)
        if budget:
            cost = replace(cost, budget=budget)
        unknown = sorted(set(cost.budget) - {DEFAULT, *self.targets})
        if unknown:
            raise ConfigError(
                f"PlaceTargets: a budget for {unknown}, which is not a target here; "
                f"targets: {', '.join([DEFAULT, *self.targets])}"
            )
        return cost

    def partition(self, mod: IRModule, placed: Placed) -> IRModule:
        """mod with the placement annotated, regions merged and partitioned."""
        return partition_placed(mod, placed, self.bind_constants)


@dataclass(frozen=True, slots=True)
class PlacementChoice(PassReport):
    """What PlaceTargets chose: the model's cost of its placement and of the
    first-supporting-target one, regions, functions the offload rules rewrote; when the
    cost model measures, the candidate that ran fastest and each candidate's time."""

    cost: float
    greedy_cost: float
    regions: int
    rewritten_functions: int
    chosen: str = ""  # "" when nothing was measured
    measured_ms: dict[str, float] = field(default_factory=dict)
    runs_failed: bool = False

    def measured(self, chosen: str, ms: dict[str, float], failed: bool) -> PlacementChoice:
        return PlacementChoice(
            self.cost, self.greedy_cost, self.regions, self.rewritten_functions, chosen, ms, failed
        )
