"""The placement cost model and its exact solution (an integer program), without the pass.

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
target) entry: entry >= placed(consumer, T) - placed(value, T).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from egraph_ir.errors import PassError
from egraph_ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from egraph_ir.highs import Row, add_columns, add_rows, new_highs
from egraph_ir.module import IRModule
from egraph_ir.registry import Op
from egraph_ir.support import composite_target, list_targets, supports
from egraph_ir.types import TensorType, tensor_types
from egraph_ir.visitor import post_order

from .regions import DEFAULT

TIME_LIMIT_S = 10.0  # of one placement integer program

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
        name = call_name(call)
        entry = ops.get((name, target))
        if entry is None:
            return 0.0 if target == DEFAULT else None
        return float(entry(call) if callable(entry) else entry)

    return PlacementCost(op, dict(launch or {}), per_byte)


def call_name(call: Call) -> str:
    if isinstance(call.op, Op):
        return call.op.name
    target = composite_target(call.op) if isinstance(call.op, Function) else None
    return f"composite {target}" if target else "?"


def is_composite(call: Call) -> bool:
    return isinstance(call.op, Function) and bool(composite_target(call.op))


def _placeable(n: Expr) -> bool:
    """An op call, or a call of a composite function (MergeComposite)."""
    return isinstance(n, Call) and (isinstance(n.op, Op) or is_composite(n))


@dataclass
class Problem:
    """The calls of one function, the values they read and the targets each may use."""

    calls: list[Call]
    choices: dict[Call, dict[str, float]]  # call -> {target: cost}
    readers: dict[Expr, list[Call]]  # value -> the calls reading it
    outputs: list[Expr]  # values the function returns
    bytes_of: dict[Expr, int]
    homes: dict[Expr, Expr] = field(default_factory=dict)  # a tuple's field -> its producer

    def home(self, value: Expr) -> Expr:
        """The expression whose placement holds `value`: a field of a tuple-producing call
        (`%bn.0`) is where the call is, not a value of its own on the host."""
        return self.homes.get(value, value)


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
        if isinstance(n, Call | Var | TupleGetItem):
            bytes_of[n] = sum(t.nbytes for t in tensor_types(n.checked_type))
    body = fn.body
    outputs = list(body.fields) if isinstance(body, Tuple) else [body]
    homes: dict[Expr, Expr] = {}
    for value in [*readers, *outputs]:
        producer = value
        while isinstance(producer, TupleGetItem):
            producer = producer.tuple_value
        if producer is not value and producer in choices:
            homes[value] = producer
    return Problem(calls, choices, readers, outputs, bytes_of, homes)


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
        home = place.get(problem.home(value), DEFAULT)
        for t in {place.get(u, DEFAULT) for u in users} - {home}:
            entry = cost.launch_of(t) + cost.per_byte * problem.bytes_of.get(value, 0)
            spent[t] = spent.get(t, 0.0) + entry
    for out in problem.outputs:
        if place.get(problem.home(out), DEFAULT) != DEFAULT:
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
        home = problem.home(out)
        options = problem.choices.get(home, {}) if isinstance(home, Call) else {}
        for t in options:
            if t != DEFAULT:
                costs[columns[(home, t)]] += cost.per_byte * problem.bytes_of.get(out, 0)
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
            home = problem.home(source)
            held = columns.get((home, t))
            for u in users:
                if (u, t) not in columns:
                    continue
                row = [(entry, 1.0), (columns[(u, t)], -1.0)]
                if held is not None:
                    row.append((held, 1.0))
                elif t == DEFAULT and not isinstance(home, Call):
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
class Plan:
    """One function's placement: the body placed (rewritten where that paid), its
    problem and the target of each call; and the body and problem as given."""

    body: Expr
    problem: Problem
    place: dict[Expr, str]
    given_body: Expr
    given_problem: Problem
