"""Extraction: choose one e-node per needed e-class, then rebuild IR.

Runtime cost is a DAG cost — a shared e-class is computed once — so every extractor is judged
by `dag_cost`. Extractors:

- `greedy`: cheapest node per class by *tree* cost, relaxed bottom-up to a fixpoint
  (Dijkstra-like; fast; always acyclic because a node's cost includes its children's);
- `greedy-dag`: the same relaxation over *sets* of classes, so a shared class is counted once
  (extraction-gym's greedy-dag; a node whose set already holds its own class would close a
  cycle and is skipped); it stops at a work budget and keeps the greedy answer;
- `ilp`: DAG-optimal with HiGHS: a binary per e-node, the root class needs a node, a chosen
  node needs a node in each child class, order variables per class forbid cycles (MTZ),
  warm-started from the better heuristic and never returned worse than it;
- `auto`: `ilp` when the e-graph has at most `ILP_AUTO_MAX_NODES` e-nodes, else `greedy-dag`.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import CompilerError, ConfigError
from ..expr import Call, Constant, Expr, Tuple, TupleGetItem
from ..registry import Op
from ..types import Type
from .cost import CostModel, balanced_cost
from .graph import ENode, Snapshot, TensorEGraph, Value, ctor_op, decode_attr

EXTRACTORS = ("greedy", "greedy-dag", "ilp", "auto")
ILP_AUTO_MAX_NODES = 3000
GREEDY_DAG_BUDGET = 20_000_000  # set entries merged before greedy-dag gives up


Choice = dict[Value, ENode]


class CostTable:
    """Own cost of every e-node and the type of every class, for one snapshot."""

    def __init__(self, g: TensorEGraph, snap: Snapshot, model: CostModel) -> None:
        self.g, self.snap = g, snap
        self.own: dict[ENode, float] = {
            n: model(n, [self.class_type(c) for c in n.children], self.class_type(n.eclass))
            for n in snap.nodes
        }

    def class_type(self, c: Value) -> Type:
        return self.g.handle_types[min(self.snap.class_handles[c])]


@dataclass
class ExtractionResult:
    """The chosen nodes, their DAG cost and how the extractor got there."""

    choice: Choice
    root: Value
    cost: float  # DAG cost: each chosen class counted once
    extractor: str
    status: str = "heuristic"  # or "optimal", "feasible" (ILP stopped at its time limit)
    gap: float | None = None  # relative MIP gap when the ILP stopped early
    seconds: float = 0.0
    candidates: dict[str, float] = field(default_factory=dict)  # cost per extractor tried

    def to_ir(self, g: TensorEGraph) -> Expr:
        return to_ir(g, self.choice, self.root)


# ---------------------------------------------------------------- shared helpers
def reachable(choice: Choice, root: Value) -> list[Value]:
    """Classes used by the chosen program, children before parents; raises on a cycle."""
    order: list[Value] = []
    state: dict[Value, int] = {}  # 1: on the path, 2: done
    stack: list[tuple[Value, bool]] = [(root, False)]
    while stack:
        c, expanded = stack.pop()
        if expanded:
            state[c] = 2
            order.append(c)
            continue
        if state.get(c) == 2:
            continue
        if state.get(c) == 1:
            raise CompilerError("extraction chose a cyclic program")
        state[c] = 1
        stack.append((c, True))
        for k in reversed(choice[c].children):
            if state.get(k) == 1:
                raise CompilerError("extraction chose a cyclic program")
            if state.get(k) != 2:
                stack.append((k, False))
    return order


def dag_cost(table: CostTable, choice: Choice, root: Value) -> float:
    return sum(table.own[choice[c]] for c in reachable(choice, root))


def to_ir(g: TensorEGraph, choice: Choice, root: Value) -> Expr:
    """Rebuild IR without recursion; one IR node per chosen class (sharing is kept)."""
    built: dict[Value, Expr] = {}
    for c in reachable(choice, root):
        node = choice[c]
        built[c] = _node_ir(g, node, [built[k] for k in node.children])
    return built[root]


def _node_ir(g: TensorEGraph, node: ENode, kids: list[Expr]) -> Expr:
    if node.ctor in ("Var", "Opaque"):
        return g.leaves[node.literals[0]]
    if node.ctor == "Const":
        return g.constants[node.literals[0]]
    if node.ctor == "Get":
        return TupleGetItem(kids[0], int(node.literals[0]))
    if node.ctor.startswith("Tup"):
        return Tuple(tuple(kids))
    op: Op = ctor_op(node.ctor)
    attrs = {a.name: decode_attr(s) for a, s in zip(op.attrs, node.literals, strict=True)}
    return Call(op, tuple(kids), attrs)  # type: ignore[arg-type]


def _parents(snap: Snapshot) -> dict[Value, list[ENode]]:
    parents: dict[Value, list[ENode]] = defaultdict(list)
    for n in snap.nodes:
        for c in set(n.children):
            parents[c].append(n)
    return parents


# ---------------------------------------------------------------- greedy (tree cost)
def greedy(table: CostTable) -> tuple[Choice, dict[Value, float]]:
    """Cheapest node per class by tree cost: a node is ready when all its children have a
    cost; each improvement re-examines the node's parents."""
    parents = _parents(table.snap)
    choice: Choice = {}
    cost: dict[Value, float] = {}
    heap: list[tuple[float, int, ENode]] = []
    counter = 0
    for n in table.snap.nodes:
        if not n.children:
            heap.append((table.own[n], counter, n))
            counter += 1
    heapq.heapify(heap)
    while heap:
        total, _, n = heapq.heappop(heap)
        if total >= cost.get(n.eclass, math.inf):
            continue
        cost[n.eclass], choice[n.eclass] = total, n
        for p in parents[n.eclass]:
            if all(c in cost for c in p.children):
                t = table.own[p] + sum(cost[c] for c in p.children)
                if t < cost.get(p.eclass, math.inf):
                    heapq.heappush(heap, (t, counter, p))
                    counter += 1
    return choice, cost


# ---------------------------------------------------------------- greedy-dag
def greedy_dag(table: CostTable, start: Choice) -> Choice | None:
    """Relax with sets of (class -> cost) so shared classes count once; None when the work
    budget runs out (the caller keeps `start`)."""
    parents = _parents(table.snap)
    sets: dict[Value, dict[Value, float]] = {}
    total: dict[Value, float] = {}
    choice: Choice = dict(start)
    queue = [n for n in table.snap.nodes if not n.children]
    queued = set(queue)
    work = 0
    while queue:
        n = queue.pop()
        queued.discard(n)
        if any(c not in sets for c in n.children):
            continue
        merged: dict[Value, float] = {}
        for c in n.children:
            child = sets[c]
            if len(child) > len(merged):
                child, merged = merged, dict(child)
            merged.update(child)
            work += len(child)
        if n.eclass in merged:
            continue  # choosing n would make its class depend on itself
        merged[n.eclass] = table.own[n]
        cost = sum(merged.values())
        work += len(merged)
        if work > GREEDY_DAG_BUDGET:
            return None
        if cost < total.get(n.eclass, math.inf):
            total[n.eclass], sets[n.eclass], choice[n.eclass] = cost, merged, n
            for p in parents[n.eclass]:
                if p not in queued:
                    queue.append(p)
                    queued.add(p)
    return choice


# ---------------------------------------------------------------- ILP
MIN_SOLVE_SECONDS = 0.01  # below this the solver cannot even start: keep the warm start


def ilp(
    table: CostTable, root: Value, warm: Choice, time_limit: float
) -> tuple[Choice, str, float | None]:
    """DAG-optimal choice with HiGHS (see the module docstring); returns (choice, status, gap).
    `warm` must be a valid acyclic choice: it seeds the solver and is the fallback. The
    time limit covers building the model too: the solver gets what is left of it."""
    import highspy
    import numpy as np

    from ..highs import new_highs

    deadline = time.perf_counter() + time_limit
    if time_limit < MIN_SOLVE_SECONDS:
        return warm, "time-out", None

    classes = _reachable_classes(table.snap, root)
    nodes = [n for c in classes for n in table.snap.by_class[c]]
    col = {n: i for i, n in enumerate(nodes)}
    order_col = {c: len(nodes) + i for i, c in enumerate(classes)}
    n_cols = len(nodes) + len(classes)
    big = float(len(classes) + 1)
    inf = highspy.kHighsInf

    h = new_highs()
    costs = np.array([table.own[n] for n in nodes] + [0.0] * len(classes))
    lower = np.zeros(n_cols)
    upper = np.array(
        [0.0 if n.eclass in n.children else 1.0 for n in nodes] + [big - 1] * len(classes)
    )  # a node that is its own child can never be chosen
    h.addVars(n_cols, lower, upper)
    h.changeColsCost(n_cols, np.arange(n_cols, dtype=np.int32), costs)
    h.changeColsIntegrality(
        len(nodes),
        np.arange(len(nodes), dtype=np.int32),
        np.array([highspy.HighsVarType.kInteger] * len(nodes)),
    )
    rows: list[tuple[float, float, list[tuple[int, float]]]] = []
    rows.append((1.0, inf, [(col[n], 1.0) for n in table.snap.by_class[root]]))
    for c in classes:
        members = table.snap.by_class[c]
        if len(members) > 1:
            rows.append((-inf, 1.0, [(col[n], 1.0) for n in members]))
    for i, n in enumerate(nodes):
        if i % 4096 == 0 and time.perf_counter() > deadline:
            return warm, "time-out", None  # building the model alone used the time
        if n.eclass in n.children:
            continue  # fixed to 0 above
        for k in set(n.children):
            cover = [(col[m], 1.0) for m in table.snap.by_class[k]]
            rows.append((0.0, inf, [*cover, (col[n], -1.0)]))
            order = [(order_col[n.eclass], 1.0), (order_col[k], -1.0), (col[n], -big)]
            rows.append((1.0 - big, inf, order))  # t_class >= t_child + 1 when n is chosen
    lo = np.array([r[0] for r in rows])
    hi = np.array([r[1] for r in rows])
    starts = np.cumsum([0] + [len(r[2]) for r in rows[:-1]]).astype(np.int32)
    index = np.array([j for r in rows for j, _ in r[2]], dtype=np.int32)
    value = np.array([v for r in rows for _, v in r[2]])
    if h.addRows(len(rows), lo, hi, len(index), starts, index, value) != highspy.HighsStatus.kOk:
        raise CompilerError("the extraction ILP could not be built")

    start = np.zeros(n_cols)
    used = reachable(warm, root)
    for depth, c in enumerate(used):  # children come first: their depth is smaller
        start[col[warm[c]]] = 1.0
        start[order_col[c]] = float(depth)
    solution = highspy.HighsSolution()
    solution.col_value = list(start)
    h.setSolution(solution)
    remaining = deadline - time.perf_counter()
    if remaining < MIN_SOLVE_SECONDS:
        return warm, "time-out", None
    h.setOptionValue("time_limit", remaining)
    h.run()

    status = h.getModelStatus()
    info = h.getInfo()
    if info.primal_solution_status != 2:  # no feasible solution found in time
        return warm, "time-out", None
    x = h.getSolution().col_value
    choice: Choice = {}
    for c in classes:
        picked = [n for n in table.snap.by_class[c] if x[col[n]] > 0.5]
        if picked:
            choice[c] = min(picked, key=lambda n: table.own[n])
    optimal = status == highspy.HighsModelStatus.kOptimal
    gap = None if optimal else float(info.mip_gap)
    return choice, "optimal" if optimal else "feasible", gap


def _reachable_classes(snap: Snapshot, root: Value) -> list[Value]:
    seen = {root}
    stack = [root]
    while stack:
        c = stack.pop()
        for n in snap.by_class[c]:
            for k in n.children:
                if k not in seen:
                    seen.add(k)
                    stack.append(k)
    return sorted(seen, key=str)


# ---------------------------------------------------------------- entry point
def extract(
    g: TensorEGraph,
    snap: Snapshot,
    root: Value,
    extractor: str = "greedy",
    cost_model: CostModel = balanced_cost,
    time_limit: float = 10.0,
) -> ExtractionResult:
    """Choose the program for `root` with the named extractor under `cost_model`."""
    if extractor not in EXTRACTORS:
        raise ConfigError(f"unknown extractor '{extractor}'; known: {', '.join(EXTRACTORS)}")
    t0 = time.perf_counter()
    table = CostTable(g, snap, cost_model)
    tree_choice, _ = greedy(table)
    if root not in tree_choice:
        raise CompilerError("the root e-class has no finite-cost program")
    candidates = {"greedy": dag_cost(table, tree_choice, root)}
    best, used = tree_choice, "greedy"
    if extractor == "auto":
        size = sum(len(snap.by_class[c]) for c in _reachable_classes(snap, root))
        extractor = "ilp" if size <= ILP_AUTO_MAX_NODES else "greedy-dag"
    if extractor in ("greedy-dag", "ilp"):
        dag_choice = greedy_dag(table, tree_choice)
        if dag_choice is not None:
            try:
                candidates["greedy-dag"] = dag_cost(table, dag_choice, root)
            except CompilerError:
                dag_choice = None  # a stale set closed a cycle: keep the greedy answer
        if dag_choice is not None and candidates["greedy-dag"] < candidates["greedy"]:
            best, used = dag_choice, "greedy-dag"
    status, gap = "heuristic", None
    if extractor == "ilp":
        remaining = time_limit - (time.perf_counter() - t0)
        choice, status, gap = ilp(table, root, best, remaining)
        if status != "time-out":
            candidates["ilp"] = dag_cost(table, choice, root)
            if candidates["ilp"] <= candidates[used]:
                best, used = choice, "ilp"
    return ExtractionResult(
        best,
        root,
        candidates[used],
        used,
        status,
        gap,
        time.perf_counter() - t0,
        candidates,
    )


def constant_of(g: TensorEGraph, snap: Snapshot, c: Value) -> Constant | None:
    """A constant in class c, if it has one."""
    for n in snap.by_class.get(c, ()):
        if n.ctor == "Const":
            return g.constants[n.literals[0]]
    return None
