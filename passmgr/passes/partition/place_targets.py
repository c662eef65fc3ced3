"""PlaceTargets: every call on the target where the whole program costs least, chosen
exactly (an integer program) instead of AnnotateTarget's first-supporting-target rule.

The cost of a placement (`placement_cost`, also used by the tests' brute force):

- each call costs `cost.op(call, target)` on its target (None: the target cannot run it;
  the host, `default`, runs everything);
- each value that a call on target T reads from elsewhere (another target, the host, a
  graph input) is an entry into T's region: `cost.launch_of(T)` (a call into the external
  library or runtime; 0 for the host) plus `cost.per_byte` times its bytes (the copy). A
  value entering T once serves every consumer on T;
- a function result computed on a target is copied back to the host (`per_byte`).

Charging launches per entering value, not per op, is what makes a region of many ops pay
one launch: a per-op cost model would never offload a chain whose ops are cheap one by one.
The integer program (HiGHS) has a binary per (call, supporting target) and per (value,
target) entry: entry >= placed(consumer, T) - placed(value, T). Then the placement is
annotated, regions merged (without cycles) and partitioned as by the rest of the flow.
Functions with Let or If are left to the host.

Two steps refine this: the function is also saturated with rules that expose offloads
and placed by one integer program over the e-graph (place_extract.py), kept when cheaper;
and a cost model that can measure has its answer checked against real runs of the
candidate placements (place_measured.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from egraph_ir.egraph import Limits, Rewrite
from egraph_ir.errors import ConfigError, PassError
from egraph_ir.expr import Call, Constant, Expr, Function, If, Let, Tuple, Var
from egraph_ir.highs import Row, add_columns, add_rows, new_highs
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.registry import Op
from egraph_ir.support import composite_target, list_targets, supports
from egraph_ir.types import TensorType, tensor_types
from egraph_ir.visitor import post_order
from rules import RuleSet

from ...context import PassContext
from ...pass_base import ModulePass, Sequential
from ...registry import register_pass
from ..eqsat import nothing_to_do, resolve_rules
from .annotate_target import annotate_function, strip_annotations
from .merge_regions import MergeCompilerRegions
from .partition_graph import PartitionGraph
from .place_extract import place_by_extraction
from .regions import DEFAULT

TIME_LIMIT_S = 10.0
# flexible matching (see place_extract); "offload+layout" also cancels transposes
DEFAULT_RULES = "offload"

OpCost = Callable[[Call, str], "float | None"]
Measure = Callable[[Sequence[IRModule]], list[float]]


@dataclass(frozen=True)
class PlacementCost:
    """What a placement costs: `op(call, target)` (None where the target cannot run the
    call; the host must run everything), `launch[target]` per value entering the target's
    region, `per_byte` per byte copied between targets."""

    op: OpCost
    launch: Mapping[str, float] | Callable[[str], float] = field(default_factory=dict)
    per_byte: float = 0.0
    measure: Measure | None = None  # seconds of whole partitioned modules (place_measured)

    def launch_of(self, target: str) -> float:
        if target == DEFAULT:
            return 0.0
        if callable(self.launch):
            return float(self.launch(target))
        return float(self.launch.get(target, 0.0))


NOMINAL_FLOPS_PER_S = 1e9
NOMINAL_LAUNCH_S = 5e-6  # a call into an external runtime: a few microseconds
NOMINAL_S_PER_BYTE = 1e-10


def nominal_cost() -> PlacementCost:
    """The default model, knowing nothing of the targets: every op costs its FLOPs at
    1 GFLOP/s everywhere, a region entry 5 us, a copy 0.1 ns per byte. With equal op costs
    nothing is worth a launch, so this keeps everything on the host; give measured or
    tabled costs (`cost_table`) to offload."""

    def op(call: Call, target: str) -> float | None:
        if not isinstance(call.op, Op):
            return None
        types = [a.checked_type for a in call.args]
        tensors = [t for t in types if isinstance(t, TensorType)]
        return call.op.cost(tensors, call.checked_type, call.attrs).flops / NOMINAL_FLOPS_PER_S

    launch = dict.fromkeys(list_targets(), NOMINAL_LAUNCH_S)
    return PlacementCost(op, launch, NOMINAL_S_PER_BYTE)


def cost_table(
    ops: Mapping[tuple[str, str], float | Callable[[Call], float]],
    launch: Mapping[str, float] | None = None,
    per_byte: float = 0.0,
) -> PlacementCost:
    """A PlacementCost from a table {(op name, target): cost or cost(call)}; an op a target
    has no entry for (and does not `supports`) cannot go there. Host ("default") entries
    default to 0."""

    def op(call: Call, target: str) -> float | None:
        name = _op_name(call)
        entry = ops.get((name, target))
        if entry is None:
            return 0.0 if target == DEFAULT else None
        return float(entry(call) if callable(entry) else entry)

    return PlacementCost(op, dict(launch or {}), per_byte)


def _op_name(call: Call) -> str:
    if isinstance(call.op, Op):
        return call.op.name
    target = composite_target(call.op) if isinstance(call.op, Function) else None
    return f"composite {target}" if target else "?"


def _is_composite(call: Call) -> bool:
    return isinstance(call.op, Function) and bool(composite_target(call.op))


def _placeable(n: Expr) -> bool:
    """An op call, or a call of a composite function (MergeComposite)."""
    return isinstance(n, Call) and (isinstance(n.op, Op) or _is_composite(n))


@dataclass
class Problem:
    """The calls of one function, the values they read and the targets each may use."""

    calls: list[Call]
    choices: dict[Call, dict[str, float]]  # call -> {target: cost}
    readers: dict[Expr, list[Call]]  # value -> the calls reading it
    outputs: list[Expr]  # values the function returns
    bytes_of: dict[Expr, int]


def problem_of(fn: Function, targets: Sequence[str], cost: PlacementCost) -> Problem:
    calls: list[Call] = []
    choices: dict[Call, dict[str, float]] = {}
    readers: dict[Expr, list[Call]] = {}
    bytes_of: dict[Expr, int] = {}
    for n in post_order(fn.body, into_functions=False):
        if isinstance(n, Call) and _placeable(n):
            host = cost.op(n, DEFAULT)
            options = {DEFAULT: 0.0 if host is None else host}
            for t in targets:
                c = cost.op(n, t)
                if c is not None and supports(t, n):
                    options[t] = c
            calls.append(n)
            choices[n] = options
            for a in dict.fromkeys(n.args):
                if not isinstance(a, Constant):  # constants are bound into the regions
                    readers.setdefault(a, []).append(n)
        if isinstance(n, Call | Var):
            bytes_of[n] = sum(t.nbytes for t in tensor_types(n.checked_type))
    body = fn.body
    outputs = list(body.fields) if isinstance(body, Tuple) else [body]
    return Problem(calls, choices, readers, outputs, bytes_of)


def placement_cost(problem: Problem, place: Mapping[Expr, str], cost: PlacementCost) -> float:
    """The cost model of the module docstring for one placement (calls absent: host)."""
    return sum(cost_by_target(problem, place, cost).values())


def cost_by_target(
    problem: Problem, place: Mapping[Expr, str], cost: PlacementCost
) -> dict[str, float]:
    """placement_cost split by where it is spent: each target's ops and the entries into
    its region (copies back to the host count for the host)."""
    spent: dict[str, float] = {DEFAULT: 0.0}
    for c in problem.calls:
        t = place.get(c, DEFAULT)
        spent[t] = spent.get(t, 0.0) + problem.choices[c][t]
    for value, users in problem.readers.items():
        home = place.get(value, DEFAULT)
        for t in {place.get(u, DEFAULT) for u in users} - {home}:
            entry = cost.launch_of(t) + cost.per_byte * problem.bytes_of.get(value, 0)
            spent[t] = spent.get(t, 0.0) + entry
    for out in problem.outputs:
        if place.get(out, DEFAULT) != DEFAULT:
            spent[DEFAULT] += cost.per_byte * problem.bytes_of.get(out, 0)
    return spent


def solve(problem: Problem, cost: PlacementCost) -> dict[Expr, str]:
    """The cheapest placement, by an integer program (see the module docstring)."""
    import highspy

    if not problem.calls:
        return {}
    columns: dict[tuple[Expr, str], int] = {}
    costs: list[float] = []
    for c in problem.calls:
        for t, value in problem.choices[c].items():
            columns[(c, t)] = len(costs)
            costs.append(value)
    for out in problem.outputs:  # results computed off the host are copied back
        options = problem.choices.get(out, {}) if isinstance(out, Call) else {}
        for t in options:
            if t != DEFAULT:
                costs[columns[(out, t)]] += cost.per_byte * problem.bytes_of.get(out, 0)
    rows: list[Row] = []
    for c in problem.calls:
        rows.append((1.0, 1.0, [(columns[(c, t)], 1.0) for t in problem.choices[c]]))
    inf = highspy.kHighsInf
    n_placed = len(costs)
    for source, users in problem.readers.items():
        targets = {t for u in users for t in problem.choices[u]}
        for t in targets:
            entry = len(costs)
            size = problem.bytes_of.get(source, 0)
            costs.append(cost.launch_of(t) + cost.per_byte * size)
            held = columns.get((source, t))
            for u in users:
                if (u, t) not in columns:
                    continue
                row = [(entry, 1.0), (columns[(u, t)], -1.0)]
                if held is not None:
                    row.append((held, 1.0))
                elif t == DEFAULT and not isinstance(source, Call):
                    continue  # graph inputs live on the host
                rows.append((0.0, inf, row))
    h = new_highs(TIME_LIMIT_S)
    scale = 1.0 / max([abs(v) for v in costs] + [1e-30])
    add_columns(h, [v * scale for v in costs], integral=n_placed)
    add_rows(h, rows)
    h.run()
    if h.getInfo().primal_solution_status != 2:
        raise PassError("PlaceTargets: the placement program found no solution in time")
    x = h.getSolution().col_value
    place: dict[Expr, str] = {}
    for c in problem.calls:
        best = max(problem.choices[c], key=lambda t: x[columns[(c, t)]])
        place[c] = best
    return place


def greedy_placement(problem: Problem, targets: Sequence[str]) -> dict[Expr, str]:
    """AnnotateTarget's rule: the first target in the list that supports the call."""
    return {
        c: next((t for t in targets if t in problem.choices[c]), DEFAULT) for c in problem.calls
    }


@dataclass
class RegionReport:
    target: str
    ops: list[str]
    cost: float  # this region's own: its ops on target, one launch and copy per entering value
    total: float  # the whole placement's cost
    alternative: str  # the best other target for these ops, all moved together
    alternative_total: float  # the whole placement's cost with them there

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def report_regions(
    problem: Problem, place: Mapping[Expr, str], cost: PlacementCost
) -> list[RegionReport]:
    """Per group of connected calls on one external target: its target, its own cost, and
    the best rejected alternative (the group moved whole to another target) with the whole
    placement's cost then."""
    total = placement_cost(problem, place, cost)
    neighbours: dict[Expr, set[Call]] = {c: set() for c in problem.calls}
    for value, users in problem.readers.items():
        for u in users:
            if isinstance(value, Call) and value in neighbours and place[value] == place[u]:
                neighbours[value].add(u)
                neighbours[u].add(value)
    seen: set[Expr] = set()
    out = []
    for c in problem.calls:
        if c in seen or place[c] == DEFAULT:
            continue
        group: list[Call] = []
        stack = [c]
        seen.add(c)
        while stack:
            m = stack.pop()
            group.append(m)
            for k in neighbours[m] - seen:
                seen.add(k)
                stack.append(k)
        best_t, best_cost = DEFAULT, float("inf")
        for t in set.intersection(*(set(problem.choices[m]) for m in group)) - {place[c]}:
            moved: dict[Expr, str] = {**place, **dict.fromkeys(group, t)}
            alt = placement_cost(problem, moved, cost)
            if alt < best_cost:
                best_t, best_cost = t, alt
        t = place[c]
        own = sum(problem.choices[m][t] for m in group)
        inside = set(group)
        entering = {
            v for v, users in problem.readers.items() if v not in inside and inside & set(users)
        }
        own += sum(cost.launch_of(t) + cost.per_byte * problem.bytes_of.get(v, 0) for v in entering)
        names = [_op_name(m) for m in group]
        out.append(RegionReport(t, names, own, total, best_t, best_cost))
    return out


@dataclass
class PlacementReport:
    """The chosen placement's cost, AnnotateTarget's (greedy) cost under the same model,
    and per region its target and the best rejected alternative. `str()` is a table."""

    cost: float = 0.0
    greedy_cost: float = 0.0
    regions: list[RegionReport] = field(default_factory=list)
    rewritten: int = 0  # functions whose program the offload rules changed

    def to_json(self) -> str:
        import json

        data = {"cost": self.cost, "greedy_cost": self.greedy_cost, "rewritten": self.rewritten}
        return json.dumps({**data, "regions": [r.to_dict() for r in self.regions]}, indent=1)

    def __str__(self) -> str:
        lines = [
            f"placement cost {self.cost:.6g} (first-supporting-target: {self.greedy_cost:.6g})"
        ]
        for r in self.regions:
            lines.append(
                f"  {r.target:<12} {', '.join(r.ops)}: {r.cost:.3g}; rejected {r.alternative} "
                f"(total +{r.alternative_total - r.total:.3g})"
            )
        return "\n".join(lines)


@dataclass
class Plan:
    """One function's placement: the body placed (rewritten where that paid), its
    problem and the target of each call; and the body and problem as given."""

    body: Expr
    problem: Problem
    place: dict[Expr, str]
    given_body: Expr
    given_problem: Problem


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
        flexible = rewrites and not any(_is_composite(c) for c in problem.calls)
        if flexible and not nothing_to_do(plain, list(rewrites), fold_constants=True):
            found = place_by_extraction(
                plain, targets, cost, list(rewrites), limits or Limits(), TIME_LIMIT_S
            )
            if found is not None:
                rewritten = problem_of(found.function, targets, cost)
                if placement_cost(rewritten, found.place, cost) < placement_cost(
                    problem, place, cost
                ):
                    problem, place = rewritten, found.place
                    placed_body = found.function.body
                    report.rewritten += 1
        report.cost += placement_cost(problem, place, cost)
        report.regions += report_regions(problem, place, cost)
        plans[name] = Plan(placed_body, problem, place, body, given)
    return plans, report


def partition_placed(
    mod: IRModule,
    placed: Mapping[str, tuple[Expr, Mapping[Expr, str]]],
    bind_constants: bool,
    ctx: PassContext,
) -> IRModule:
    """mod with each named function's body placed as given ({call: target}; absent
    calls on the host), regions merged and partitioned."""
    functions = dict(mod.items())
    for name, (body, place) in placed.items():

        def choose(call: Call, place: Mapping[Expr, str] = place) -> str:
            return place.get(call, DEFAULT)

        functions[name] = annotate_function(functions[name], body, choose, True, ctx)
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
    that overrule it (a cost model that can measure) are in the pass's statistics."""
    return plan_placement(mod, targets, cost, _rewrites(rules), Limits())[1]


def _rewrites(rules: str | RuleSet, fast_math: bool = True) -> list[Rewrite]:
    return resolve_rules(rules).enabled(fast_math).rewrites()


@register_pass
@dataclass(frozen=True)
class PlaceTargets(ModulePass):
    """Place calls on targets at least cost, then merge regions and partition (see the
    module docstring). Without targets: every registered one; without a cost model:
    `nominal_cost()`. Statistics: `cost`, `greedy cost`, `regions`, `rewritten functions`
    and, when the cost model measures, `measured ms: <candidate>` and `chosen: <candidate>`;
    the per-region report is `placement_report(mod, targets, cost)`."""

    targets: Sequence[str] = ()
    cost: PlacementCost | None = None
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
        _rewrites(self.rules, self.fast_math)  # bad names and files fail when built

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        assert self.cost is not None
        limits = Limits(
            iterations=int(ctx.get_config("eqsat.iter_limit")),
            nodes=int(ctx.get_config("eqsat.node_limit")),
            seconds=float(ctx.get_config("eqsat.time_limit_s")),
        )
        rewrites = _rewrites(self.rules, self.fast_math)
        plans, report = plan_placement(mod, self.targets, self.cost, rewrites, limits)
        ctx.record("cost", report.cost)
        ctx.record("greedy cost", report.greedy_cost)
        ctx.record("regions", len(report.regions))
        ctx.record("rewritten functions", report.rewritten)
        placed: dict[str, tuple[Expr, Mapping[Expr, str]]] = {
            name: (p.body, p.place) for name, p in plans.items()
        }
        if self.cost.measure is not None:
            from .place_measured import choose_by_running  # it builds on this module

            placed = choose_by_running(
                mod, plans, self.targets, self.cost, self.bind_constants, ctx
            )
        return partition_placed(mod, placed, self.bind_constants, ctx)
