"""Placement as extraction: the program and the target of each of its calls chosen by one
integer program over an e-graph.

PlaceTargets saturates a function with rules that expose offloads (flexible matching: a
1x1 convolution is a product, see rules/builtin/offload.rules), so the e-graph holds every
form of the program those rules know. Then one integer program (HiGHS) picks one e-node
per needed e-class and a target per picked node, under place_targets' cost model (op cost
on its target, one launch and copy per value entering a target, copies of results back):

- x[n, t] binary: node n is picked and runs on target t. Leaves, tuples and fields run on
  the host; a constant is available everywhere (it is bound into the regions);
- the root class takes one node, every class at most one, and a class whose node needs
  class k makes k take one (rows summed over the class's nodes, as the extraction ILP);
- e[k, t] >= (the node of a class reading k runs on t) - (k's node runs on t), one row per
  reading class: k's value enters t, paid once however many of t's nodes read it;
- a cycle the picked nodes close is forbidden when a solution uses it, then solved again.

A rewrite is therefore kept only where a target pays for it: with no target taking the
new form, the input program costs least (ties go to fewer nodes).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from egraph_ir.egraph import Limits, Rewrite
from egraph_ir.egraph.encode import encode
from egraph_ir.egraph.extract import constant_of, node_ir, reachable
from egraph_ir.egraph.graph import ENode, Snapshot, TensorEGraph, Value
from egraph_ir.egraph.ilp import cycles_of, extractable
from egraph_ir.egraph.saturate import saturate
from egraph_ir.expr import Call, Constant, Expr, Function, Var
from egraph_ir.highs import Row, add_columns, add_rows, new_highs
from egraph_ir.infer import infer_type
from egraph_ir.registry import Op
from egraph_ir.support import supports
from egraph_ir.types import Type, tensor_types

from .place_model import PlacementCost
from .regions import DEFAULT

TIE_BREAK = 1e-9  # relative to the costliest choice, per picked op: fewer nodes win ties
MAX_ROUNDS = 50  # solves adding cycle rows before giving up on this e-graph


@dataclass
class Outcome:
    """The extracted function and the target of each of its calls."""

    function: Function
    place: dict[Expr, str]
    enodes: int  # e-nodes the integer program chose among


def place_by_extraction(
    fn: Function,
    targets: Sequence[str],
    cost: PlacementCost,
    rewrites: list[Rewrite],
    limits: Limits,
    time_limit: float,
) -> Outcome | None:
    """The cheapest (program, placement) the rewrites reach from fn, or None when the
    program found no solution in time (the caller then places fn as it is)."""
    g = TensorEGraph()
    root_handle = encode(g, fn.body)
    g.flush()
    saturate(g, rewrites, limits)
    snap = g.snapshot()
    root = snap.handle_class[root_handle]
    classes = extractable(snap.by_class, root)  # every node kept: dominance needs one cost
    options = _options(g, snap, classes, targets, cost)
    size = {c: sum(t.nbytes for t in tensor_types(_class_type(g, snap, c))) for c in classes}
    picked = _solve(classes, options, size, root, cost, time_limit)
    if picked is None:
        return None
    built: dict[Value, Expr] = {}
    place: dict[Expr, str] = {}
    choice = {c: n for c, (n, _) in picked.items()}
    for c in reachable(choice, root):
        node, target = picked[c]
        built[c] = node_ir(g, node, [built[k] for k in node.children])
        if isinstance(built[c], Call):
            place[built[c]] = target
    out = Function(fn.params, built[root])
    infer_type(out)
    return Outcome(out, place, sum(len(nodes) for nodes in classes.values()))


def _class_type(g: TensorEGraph, snap: Snapshot, c: Value) -> Type:
    return g.handle_types[min(snap.class_handles[c])]


def _type(v: Expr) -> Type | None:
    return v.type_annotation if isinstance(v, Var) else None


def _options(
    g: TensorEGraph,
    snap: Snapshot,
    classes: dict[Value, list[ENode]],
    targets: Sequence[str],
    cost: PlacementCost,
) -> dict[ENode, dict[str, float]]:
    """Per node, {target: cost} where it may run: ops ask the cost model about a call
    of the node's op over its children's types (constants as themselves)."""
    seen: dict[tuple[object, ...], dict[str, float]] = {}
    out: dict[ENode, dict[str, float]] = {}
    for nodes in classes.values():
        for n in nodes:
            if n.ctor in ("Var", "Const", "Opaque", "Get") or n.ctor.startswith("Tup"):
                out[n] = {DEFAULT: 0.0}
                continue
            kids: list[Expr] = []
            for i, k in enumerate(n.children):
                const = constant_of(g, snap, k)
                kids.append(const or Var(f"a{i}", _class_type(g, snap, k)))
            key = (n.ctor, n.literals, *(k if isinstance(k, Constant) else _type(k) for k in kids))
            if key not in seen:
                call = node_ir(g, n, kids)
                infer_type(call)
                assert isinstance(call, Call) and isinstance(call.op, Op)
                host = cost.op(call, DEFAULT)
                choices = {DEFAULT: 0.0 if host is None else float(host)}
                for t in targets:
                    c = cost.op(call, t)
                    if c is not None and supports(t, call):
                        choices[t] = float(c)
                seen[key] = choices
            out[n] = seen[key]
    return out


def _solve(
    classes: dict[Value, list[ENode]],
    options: dict[ENode, dict[str, float]],
    size: dict[Value, int],
    root: Value,
    cost: PlacementCost,
    time_limit: float,
) -> dict[Value, tuple[ENode, str]] | None:
    """The integer program of the module docstring; per picked class its node and target."""
    import highspy

    column: dict[tuple[ENode, str], int] = {}
    costs: list[float] = []
    for c, nodes in classes.items():
        for n in nodes:
            for t, value in options[n].items():
                column[(n, t)] = len(costs)
                back = cost.per_byte * size[c] if c == root and t != DEFAULT else 0.0
                costs.append(value + back)
    n_picks = len(costs)
    top = max([abs(v) for v in costs] + [1e-30])
    for (n, _), j in column.items():
        if n.ctor not in ("Var", "Const", "Opaque"):
            costs[j] += TIE_BREAK * top

    def on(c: Value, t: str | None = None) -> list[tuple[int, float]]:
        """The columns of class c's nodes (on t; a constant counts on every target)."""
        cols = []
        for n in classes[c]:
            for u in options[n]:
                if t is None or u == t or n.ctor == "Const":
                    cols.append((column[(n, u)], 1.0))
        return cols

    inf = highspy.kHighsInf
    rows: list[Row] = [(1.0, 1.0, on(root))]
    readers: dict[Value, dict[Value, list[ENode]]] = defaultdict(lambda: defaultdict(list))
    for c, nodes in classes.items():
        rows.append((0.0, 1.0, on(c)))
        for n in nodes:
            for k in dict.fromkeys(n.children):
                readers[k][c].append(n)
    for k, by_class in readers.items():
        for nodes in by_class.values():
            need = [(column[(n, t)], -1.0) for n in nodes for t in options[n]]
            rows.append((0.0, inf, on(k) + need))
        targets = {t for nodes in by_class.values() for n in nodes for t in options[n]}
        for t in sorted(targets):
            entry = len(costs)
            costs.append(cost.launch_of(t) + cost.per_byte * size[k])
            for nodes in by_class.values():
                reading = [(column[(n, t)], -1.0) for n in nodes if t in options[n]]
                if reading:
                    rows.append((0.0, inf, [(entry, 1.0), *on(k, t), *reading]))
    scale = 1.0 / top
    h = new_highs()
    add_columns(h, [v * scale for v in costs], integral=n_picks)
    add_rows(h, rows)
    deadline = time.perf_counter() + time_limit
    return _cut_cycles(h, column, options, root, deadline)


def _cut_cycles(
    h: Any,
    column: dict[tuple[ENode, str], int],
    options: dict[ENode, dict[str, float]],
    root: Value,
    deadline: float,
) -> dict[Value, tuple[ENode, str]] | None:
    """Solve; while the picked program has a cycle, forbid it and solve again."""
    import highspy

    inf = highspy.kHighsInf
    for _ in range(MAX_ROUNDS):
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return None
        h.setOptionValue("time_limit", remaining)
        h.run()
        if h.getInfo().primal_solution_status != 2:
            return None
        x = h.getSolution().col_value
        picked: dict[Value, tuple[ENode, str]] = {}
        for (n, t), j in column.items():
            if x[j] > 0.5:
                picked[n.eclass] = (n, t)
        cycles = cycles_of({c: n for c, (n, _) in picked.items()}, root)
        if not cycles:
            return picked
        add_rows(
            h,
            [
                (-inf, len(cycle) - 1.0, [(column[(n, t)], 1.0) for n in cycle for t in options[n]])
                for cycle in cycles
            ],
        )
    return None
