"""Extraction: choose one e-node per needed e-class, then rebuild IR.

Runtime cost is a DAG cost — a shared e-class is computed once — so every extractor is judged
by `dag_cost`. Extractors:

- `greedy`: cheapest node per class by *tree* cost, relaxed bottom-up to a fixpoint
  (Dijkstra-like; fast; acyclic because a node's cost includes its children's; negative
  costs count as 0 there, so a negative cycle cannot make it loop);
- `greedy-dag`: the same relaxation over *sets* of classes, so a shared class is counted once
  (extraction-gym's greedy-dag; a node whose set already holds its own class would close a
  cycle and is skipped); at its work budget or the deadline it keeps greedy's answer and
  says so in the result's notes;
- `ilp`: DAG-optimal with HiGHS (ilp.py), warm-started from the better heuristic improved
  by exact solves around it (lns.py, up to `LNS_SHARE` of the time), never returned worse
  than it; `optimal` only when the returned program costs the proven lower bound;
- any extractor returns the only program at once when every class has a single node;
- `auto` (the default): greedy and greedy-dag, the best of them and of any seed programs
  (the input) improved by exact solves around it (lns.py), then the whole ILP with what is
  left of the time when the e-graph has at most `ILP_AUTO_MAX_NODES` reachable e-nodes;
  the cheapest wins, so it is never worse than greedy-dag or the input.

Every phase counts against the one `time_limit` (the compile pipeline gives 2 s).
"""

from __future__ import annotations

import contextlib
import heapq
import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import CompilerError, ConfigError, Span
from ..expr import Call, Constant, Expr, Tuple, TupleGetItem
from ..registry import Op
from ..types import Type
from .cost import CostModel, balanced_cost
from .cycles import reachable
from .graph import ENode, Snapshot, TensorEGraph, Value, ctor_op, decode_attr
from .ilp import reachable_size
from .ilp import solve as solve_ilp
from .lns import improve

EXTRACTORS = ("greedy", "greedy-dag", "ilp", "auto")
ILP_AUTO_MAX_NODES = 50_000  # auto runs the ILP up to this many reachable e-nodes
GREEDY_DAG_BUDGET = 10_000_000  # set entries greedy-dag may hold at once (about 1 GB)
LNS_SHARE = 0.5  # of the ILP extractor's time spent improving its warm start (lns.py)


Choice = dict[Value, ENode]


class CostTable:
    """Own cost of every e-node and the type of every class, for one snapshot."""

    def __init__(self, g: TensorEGraph, snap: Snapshot, model: CostModel) -> None:
        self.g, self.snap = g, snap
        self.own: dict[ENode, float] = {}
        seen: dict[tuple[object, ...], float] = {}  # same op, attributes and types: same cost
        for n in snap.nodes:
            kids = [self.class_type(c) for c in n.children]
            out = self.class_type(n.eclass)
            key = (n.ctor, n.literals, *kids, out)
            if key not in seen:
                seen[key] = model(n, kids, out)
            self.own[n] = seen[key]

    @classmethod
    def of(cls, snap: Snapshot, own: Mapping[ENode, float]) -> CostTable:
        """A table of given costs (an e-graph read from a file has no IR types)."""
        table = cls.__new__(cls)
        table.snap, table.own = snap, dict(own)
        return table

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
    lower_bound: float | None = None  # proven: no program costs less
    time_limit: float = math.inf  # the budget every phase was counted against
    notes: list[str] = field(default_factory=list)  # fallbacks and limits met on the way

    def to_ir(self, g: TensorEGraph, spans: Mapping[Value, Span] | None = None) -> Expr:
        return to_ir(g, self.choice, self.root, spans)


# ---------------------------------------------------------------- shared helpers
def dag_cost(table: CostTable, choice: Choice, root: Value) -> float:
    return sum(table.own[choice[c]] for c in reachable(choice, root))


def to_ir(
    g: TensorEGraph, choice: Choice, root: Value, spans: Mapping[Value, Span] | None = None
) -> Expr:
    """Rebuild IR without recursion; one IR node per chosen class (sharing is kept); a
    call gets its class's span from `spans` (egraph/spans.py)."""
    built: dict[Value, Expr] = {}
    spans = spans or {}
    for c in reachable(choice, root):
        node = choice[c]
        built[c] = node_ir(g, node, [built[k] for k in node.children], spans.get(c))
    return built[root]


def node_ir(g: TensorEGraph, node: ENode, kids: list[Expr], span: Span | None = None) -> Expr:
    """One e-node as IR over its children's IR (leaves are the encoded objects)."""
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
    return Call(op, tuple(kids), attrs, span)  # type: ignore[arg-type]


def _parents(snap: Snapshot) -> dict[Value, list[ENode]]:
    parents: dict[Value, list[ENode]] = defaultdict(list)
    for n in snap.nodes:
        for c in set(n.children):
            parents[c].append(n)
    return parents


# ---------------------------------------------------------------- greedy (tree cost)
def greedy(table: CostTable) -> tuple[Choice, dict[Value, float]]:
    """Cheapest node per class by tree cost: a node is ready when all its children have a
    cost; each improvement re-examines the node's parents. A negative cost counts as 0
    here: a cycle of negative total has no cheapest tree (the relaxation would never end);
    the choice is then priced by its DAG cost with the real costs."""
    parents = _parents(table.snap)
    own = {n: max(v, 0.0) for n, v in table.own.items()}
    choice: Choice = {}
    cost: dict[Value, float] = {}
    heap: list[tuple[float, int, ENode]] = []
    counter = 0
    for n in table.snap.nodes:
        if not n.children:
            heap.append((own[n], counter, n))
            counter += 1
    heapq.heapify(heap)
    while heap:
        total, _, n = heapq.heappop(heap)
        if total >= cost.get(n.eclass, math.inf):
            continue
        cost[n.eclass], choice[n.eclass] = total, n
        for p in parents[n.eclass]:
            if all(c in cost for c in p.children):
                t = own[p] + sum(cost[c] for c in p.children)
                if t < cost.get(p.eclass, math.inf):
                    heapq.heappush(heap, (t, counter, p))
                    counter += 1
    return choice, cost


# ---------------------------------------------------------------- greedy-dag
def greedy_dag(
    table: CostTable, start: Choice, deadline: float = math.inf
) -> tuple[Choice | None, str]:
    """Relax with sets of (class -> cost) so shared classes count once. Returns the choice
    and "", or None and why it gave up (the memory budget or the deadline: the caller keeps
    `start` and reports it). With no negative cost a node is skipped when its own cost and
    its dearest child's set already reach its class's best: the union cannot be cheaper.

    The work list first runs smallest sets first, close to bottom-up, so a long chain is
    relaxed about once (ten times faster on a QDQ EfficientNet-B0: docs/performance.md), where a
    stack re-relaxed its upper part after every improvement below it; past
    ORDERED_STEPS relaxations per node it starts over as a stack, which some e-graphs
    suit better (extraction-gym's `constructed`: 1.2 s as a stack, out of time ordered)."""
    budget = ORDERED_STEPS * max(len(table.snap.nodes), 1)
    choice, why = _relax(table, start, deadline, budget)
    if choice is None and why == "too many steps":
        return _relax(table, start, deadline, None)
    return choice, why


ORDERED_STEPS = 8  # relaxations per e-node before the ordered work list gives way


def _relax(
    table: CostTable, start: Choice, deadline: float, ordered_steps: int | None
) -> tuple[Choice | None, str]:
    """greedy_dag's relaxation: with `ordered_steps`, a heap by set size that gives up
    past that many steps; with None, a stack."""
    parents = _parents(table.snap)
    nonnegative = all(v >= 0 for v in table.own.values())
    sets: dict[Value, dict[Value, float]] = {}
    total: dict[Value, float] = {}
    choice: Choice = dict(start)
    queue = [(0, k, n) for k, n in enumerate(n for n in table.snap.nodes if not n.children)]
    queued = {n for _, _, n in queue}
    counter = len(queue)
    held = steps = 0
    while queue:
        _, _, n = heapq.heappop(queue) if ordered_steps is not None else queue.pop()
        queued.discard(n)
        if any(c not in sets for c in n.children):
            continue
        own = table.own[n]
        best = total.get(n.eclass, math.inf)
        if nonnegative and n.children and own + max(total[c] for c in n.children) >= best:
            continue
        merged: dict[Value, float] = {}
        for c in n.children:
            child = sets[c]
            if len(child) > len(merged):
                child, merged = merged, dict(child)
            merged.update(child)
        if n.eclass in merged:
            continue  # choosing n would make its class depend on itself
        merged[n.eclass] = own
        cost = sum(merged.values())
        steps += 1
        if steps % 1024 == 1 and time.perf_counter() > deadline:
            return None, "out of time"
        if ordered_steps is not None and steps > ordered_steps:
            return None, "too many steps"
        if cost < best:
            held += len(merged) - len(sets.get(n.eclass, ()))
            if held > GREEDY_DAG_BUDGET:
                return None, f"more than {GREEDY_DAG_BUDGET} set entries held"
            total[n.eclass], sets[n.eclass], choice[n.eclass] = cost, merged, n
            for p in parents[n.eclass]:
                if p not in queued:
                    entry = (len(merged), counter, p)
                    if ordered_steps is not None:
                        heapq.heappush(queue, entry)
                    else:
                        queue.append(entry)
                    counter += 1
                    queued.add(p)
    return choice, ""


# ---------------------------------------------------------------- entry point
def extract(
    g: TensorEGraph | None,
    snap: Snapshot,
    root: Value,
    extractor: str = "auto",
    cost_model: CostModel = balanced_cost,
    time_limit: float = 10.0,
    seeds: Mapping[str, Choice] | None = None,
    costs: Mapping[ENode, float] | None = None,
) -> ExtractionResult:
    """Choose the program for `root` with the named extractor under `cost_model` (or the
    given per-node `costs`). `seeds` are known programs (the input, say): the answer is
    never costlier than any of them, nor than greedy (or greedy-dag, for the others).
    Every phase counts against `time_limit` (the compile pipeline gives 2 s:
    `eqsat.extract_time_limit_s`)."""
    if extractor not in EXTRACTORS:
        raise ConfigError(f"unknown extractor '{extractor}'; known: {', '.join(EXTRACTORS)}")
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    table = CostTable.of(snap, costs) if costs is not None else CostTable(g, snap, cost_model)  # type: ignore[arg-type]
    forced = _forced(snap, root)
    if forced is not None:  # one node per class: the only program there is
        cost = dag_cost(table, forced, root)
        return ExtractionResult(
            forced, root, cost, "forced", "optimal", 0.0, time.perf_counter() - t0,
            {"forced": cost}, cost, time_limit,
        )  # fmt: skip
    run = _Run(table, root, deadline, time_limit)
    run.heuristics(extractor, seeds or {})
    if extractor in ("auto", "ilp"):
        run.search()
    return run.result(t0)


class _Run:
    """One extraction: the candidates found so far and the deadline they share."""

    def __init__(self, table: CostTable, root: Value, deadline: float, budget: float) -> None:
        self.table, self.root, self.deadline, self.budget = table, root, deadline, budget
        self.found: dict[str, Choice] = {}
        self.candidates: dict[str, float] = {}
        self.used = ""
        self.status = "heuristic"
        self.gap: float | None = None
        self.lower: float | None = None
        self.notes: list[str] = []
        self.exact = False  # whether the ILP runs (auto: small enough)

    def heuristics(self, extractor: str, seeds: Mapping[str, Choice]) -> None:
        """Tree greedy always; greedy-dag for every extractor but greedy; the seeds."""
        tree_choice, _ = greedy(self.table)
        if self.root not in tree_choice:
            raise CompilerError("the root e-class has no finite-cost program")
        self.found["greedy"] = tree_choice
        if extractor == "auto":
            size = reachable_size(self.table.snap.by_class, self.root)
            self.exact = size <= ILP_AUTO_MAX_NODES
            if not self.exact:
                self.notes.append(f"no ILP: {size} reachable e-nodes > {ILP_AUTO_MAX_NODES}")
        self.exact = self.exact or extractor == "ilp"
        if extractor != "greedy":
            dag_choice, why = greedy_dag(self.table, tree_choice, self.deadline)
            if dag_choice is not None:
                self.found["greedy-dag"] = dag_choice
            else:
                self.notes.append(f"greedy-dag gave up ({why}): greedy's answer kept")
        self.found.update(seeds)
        for name, choice in self.found.items():
            # a stale greedy-dag set or a seed that closes a cycle is not a candidate
            with contextlib.suppress(CompilerError, KeyError):
                self.candidates[name] = dag_cost(self.table, choice, self.root)
        self.used = min(self.candidates, key=lambda k: (self.candidates[k], k != "greedy"))

    def search(self) -> None:
        """Exact solves around the best program (lns.py), then (when `exact`) the ILP."""
        by_class, own, root = self.table.snap.by_class, self.table.own, self.root
        share = LNS_SHARE if self.exact else 1.0
        improved, _ = improve(by_class, own, root, self.best, self._left() * share)
        cost = dag_cost(self.table, improved, root)
        if cost < self.candidates[self.used]:
            self.candidates["lns"] = cost
            self.found["lns"], self.used = improved, "lns"
        if not self.exact:
            return
        outcome = solve_ilp(by_class, own, root, self.best, self._left())
        self.lower = outcome.lower_bound
        if outcome.status == "time-out":
            self.notes.append("the ILP found nothing in time: the best heuristic kept")
            return
        cost = dag_cost(self.table, outcome.choice, root)
        self.candidates["ilp"] = cost
        if cost <= self.candidates[self.used]:
            self.found["ilp"], self.used = outcome.choice, "ilp"
        if self.lower is not None:  # the label follows the returned program's own cost
            best = self.candidates[self.used]
            self.gap = max(0.0, best - self.lower) / max(abs(best), 1e-30)
            self.status = "optimal" if self.gap <= 1e-9 else "feasible"

    @property
    def best(self) -> Choice:
        return self.found[self.used]

    def _left(self) -> float:
        return max(0.0, self.deadline - time.perf_counter())

    def result(self, t0: float) -> ExtractionResult:
        return ExtractionResult(
            self.best, self.root, self.candidates[self.used], self.used, self.status,
            self.gap, time.perf_counter() - t0, self.candidates, self.lower, self.budget,
            self.notes,
        )  # fmt: skip


def _forced(snap: Snapshot, root: Value) -> Choice | None:
    """The choice when every class reachable from root holds a single node (and it is
    acyclic), else None."""
    choice: Choice = {}
    stack = [root]
    while stack:
        c = stack.pop()
        if c in choice:
            continue
        nodes = snap.by_class.get(c, ())
        if len(nodes) != 1:
            return None
        choice[c] = nodes[0]
        stack.extend(k for k in nodes[0].children if k not in choice)
    try:
        reachable(choice, root)
    except CompilerError:
        return None
    return choice


def translate(choice: Choice, before: Snapshot, after: Snapshot) -> Choice | None:
    """A choice made in an earlier snapshot, in the classes of a later one of the same
    e-graph (the input program after saturation); None when a node is missing. Where
    saturation merged two of its classes, a node not needing its own class is preferred
    (the caller drops the choice if it still closes a cycle)."""
    nodes = set(after.nodes)

    def now(k: Value) -> Value:
        return after.handle_class[before.class_handles[k][0]]

    out: Choice = {}
    for c, n in choice.items():
        moved = ENode(n.ctor, tuple(now(k) for k in n.children), n.literals, now(c))
        if moved not in nodes:
            return None
        prev = out.get(moved.eclass)
        if prev is None or (moved.eclass in prev.children and moved.eclass not in moved.children):
            out[moved.eclass] = moved
    return out


def constant_of(g: TensorEGraph, snap: Snapshot, c: Value) -> Constant | None:
    """A constant in class c, if it has one."""
    for n in snap.by_class.get(c, ()):
        if n.ctor == "Const":
            return g.constants[n.literals[0]]
    return None
