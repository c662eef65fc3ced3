"""The cheapest placement under model.py's cost, by one integer program (HiGHS).

- x[c, t] binary: call c runs on target t, one target per call; a result computed on t
  adds its copy back to the host to x's cost;
- n[v, t] binary: value v is copied into t, n >= x[u, t] - x[home, t] for each reader u;
- y[v, s, t] in [0, 1]: v travels from s to t, y >= x[home, s] + x[u, t] - 1 (graph
  inputs start on the host: y >= x[u, t]); it costs the cheapest route's cost per byte
  times v's bytes;
- regions, for each target whose launch costs something, counted by a single-commodity
  flow: the nodes are the target's calls and entries (active when their x or n is 1), the
  arcs the reads between them. Every active node consumes one unit; a root (binary, one
  launch) supplies up to the node count; flow only runs between active nodes, so each
  group of joined active nodes needs a root and one root feeds its whole group: the roots
  are the regions;
- budgets: the bytes of the x (with the constants bound into each call) and n on t are at
  most budget[t].
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from egraph_ir.errors import PassError
from egraph_ir.expr import Call, Expr
from egraph_ir.highs import Row, add_columns, add_rows, new_highs, run_until

from ..regions import DEFAULT
from .model import PlacementCost, Problem

TIME_LIMIT_S = 10.0  # of one placement integer program

Columns = dict[tuple[Expr, str], int]


class _Program:
    """Columns and rows; binaries get their indices before the continuous columns, as
    add_columns wants integer columns first."""

    def __init__(self) -> None:
        self.costs: list[float] = []
        self.upper: list[float] = []
        self.rows: list[Row] = []
        self.integral = 0

    def column(self, cost: float, upper: float = 1.0) -> int:
        self.costs.append(cost)
        self.upper.append(upper)
        return len(self.costs) - 1

    def row(self, lower: float, upper: float, terms: list[tuple[int, float]]) -> None:
        self.rows.append((lower, upper, terms))


def solve(problem: Problem, cost: PlacementCost) -> dict[Expr, str]:
    """The cheapest placement (see the module docstring); a PassError when no placement
    fits the budgets or none is found in time."""
    import highspy

    if not problem.calls:
        return {}
    lp = _Program()
    x: Columns = {
        (c, t): lp.column(v) for c in problem.calls for t, v in problem.choices[c].items()
    }
    for c in problem.calls:
        lp.row(1.0, 1.0, [(x[(c, t)], 1.0) for t in problem.choices[c]])
    for out in problem.outputs:
        home = problem.home(out)
        for t in problem.choices.get(home, {}) if isinstance(home, Call) else {}:
            lp.costs[x[(home, t)]] += cost.copy_per_byte(t, DEFAULT) * problem.bytes_of.get(out, 0)
    n = _entries(problem, lp, x)
    nodes = _region_nodes(cost, x, n)
    roots = {(t, i): lp.column(cost.launch_of(t)) for t, ns in nodes.items() for i in ns}
    lp.integral = len(lp.costs)
    _copies(problem, cost, lp, x, n)
    _flows(problem, lp, x, n, nodes, roots)
    _budgets(problem, cost, lp, x, n)
    h = new_highs(TIME_LIMIT_S)
    scale = 1.0 / max([abs(v) for v in lp.costs] + [1e-30])
    add_columns(h, [v * scale for v in lp.costs], integral=lp.integral, upper=lp.upper)
    add_rows(h, lp.rows)
    if not run_until(h, time.perf_counter() + TIME_LIMIT_S):
        raise PassError("PlaceTargets: the placement program found no solution in time")
    if h.getModelStatus() == highspy.HighsModelStatus.kInfeasible:
        raise PassError(
            f"PlaceTargets: no placement fits the memory budgets {dict(cost.budget)} "
            f"(bytes per target: the values its calls compute and the values copied in)"
        )
    if h.getInfo().primal_solution_status != 2:
        raise PassError("PlaceTargets: the placement program found no solution in time")
    value = h.getSolution().col_value
    return {c: max(problem.choices[c], key=lambda t: value[x[(c, t)]]) for c in problem.calls}


def _homed(problem: Problem, value: Expr) -> Call | None:
    """The placed call computing value, or None for what lives on the host (inputs)."""
    home = problem.home(value)
    return home if isinstance(home, Call) and home in problem.choices else None


def _entries(problem: Problem, lp: _Program, x: Columns) -> Columns:
    """n[v, t] for every value some call may read on a target it may not be computed on."""
    n: Columns = {}
    for v, users in problem.readers.items():
        home = _homed(problem, v)
        for t in dict.fromkeys(t for u in users for t in problem.choices[u]):
            if home is None and t == DEFAULT:
                continue  # inputs live on the host
            n[(v, t)] = column = lp.column(0.0)
            for u in users:
                if (u, t) in x:
                    terms = [(column, 1.0), (x[(u, t)], -1.0)]
                    if home is not None and (home, t) in x:
                        terms.append((x[(home, t)], 1.0))
                    lp.row(0.0, float("inf"), terms)
    return n


def _copies(problem: Problem, cost: PlacementCost, lp: _Program, x: Columns, n: Columns) -> None:
    """y[v, s, t]: the copy of v from s to t at its route's cost."""
    for v, t in n:
        home = _homed(problem, v)
        sources = list(problem.choices[home]) if home is not None else [DEFAULT]
        size = problem.bytes_of.get(v, 0)
        for s in sources:
            price = cost.copy_per_byte(s, t) * size if s != t else 0.0
            if price <= 0:
                continue
            y = lp.column(price)
            for u in problem.readers[v]:
                if (u, t) not in x:
                    continue
                if home is None:
                    lp.row(0.0, float("inf"), [(y, 1.0), (x[(u, t)], -1.0)])
                else:
                    terms = [(y, 1.0), (x[(u, t)], -1.0), (x[(home, s)], -1.0)]
                    lp.row(-1.0, float("inf"), terms)


def _region_nodes(cost: PlacementCost, x: Columns, n: Columns) -> dict[str, dict[Hashable, int]]:
    """Per target with a launch cost: its flow nodes (calls and entries), each with the
    column saying it is active."""
    nodes: dict[str, dict[Hashable, int]] = {}
    launched = {t for _, t in x if t != DEFAULT and cost.launch_of(t) > 0}
    for (c, t), column in x.items():
        if t in launched:
            nodes.setdefault(t, {})[c] = column
    for (v, t), column in n.items():
        if t in launched:
            nodes.setdefault(t, {})[(v, t)] = column
    return nodes


def _flows(
    problem: Problem,
    lp: _Program,
    x: Columns,
    n: Columns,
    nodes: dict[str, dict[Hashable, int]],
    roots: dict[tuple[str, Hashable], int],
) -> None:
    """The flow that makes each target's roots count its regions."""
    for t, active in nodes.items():
        arcs: set[tuple[Hashable, Hashable]] = set()
        for v, users in problem.readers.items():
            home = _homed(problem, v)
            for u in users:
                if (u, t) not in x:
                    continue
                if home is not None and (home, t) in x:
                    arcs.add((home, u))
                if (v, t) in n:
                    arcs.add(((v, t), u))
        big = float(len(active))
        balance: dict[Hashable, list[tuple[int, float]]] = {
            i: [(roots[(t, i)], big), (column, -1.0)] for i, column in active.items()
        }
        for i, column in active.items():
            lp.row(-float("inf"), 0.0, [(roots[(t, i)], 1.0), (column, -1.0)])
        for a, b in arcs:
            for src, dst in ((a, b), (b, a)):
                f = lp.column(0.0, big)
                lp.row(-float("inf"), 0.0, [(f, 1.0), (active[src], -big)])
                lp.row(-float("inf"), 0.0, [(f, 1.0), (active[dst], -big)])
                balance[dst].append((f, 1.0))
                balance[src].append((f, -1.0))
        for terms in balance.values():
            lp.row(0.0, float("inf"), terms)


def _held(problem: Problem, call: Expr) -> int:
    """What placing `call` on a target puts there: its result and its bound constants."""
    weights = problem.constants_of.get(call, 0) if isinstance(call, Call) else 0
    return problem.bytes_of.get(call, 0) + weights


def _budgets(problem: Problem, cost: PlacementCost, lp: _Program, x: Columns, n: Columns) -> None:
    for t, limit in cost.budget.items():
        terms = [(col, float(_held(problem, e))) for (e, s), col in x.items() if s == t]
        terms += [(col, float(problem.bytes_of.get(e, 0))) for (e, s), col in n.items() if s == t]
        if terms:
            lp.row(-float("inf"), float(limit), terms)
