"""Labelled extraction: pick one e-node per needed e-class *and a label per picked node*
(for placement: the target it runs on) by one integer program (HiGHS), minimising

    sum of option costs of the picked (node, label) pairs
    + per class k and label t that k's value enters: entry(k, t), paid once however many
      nodes labelled t read it (a node labelled t reading k's value from another label)
    + result(label of the root's node)

- x[n, t] binary: node n is picked with label t (t among its options);
- the root class takes one node, every class at most one, and a class whose node needs
  class k makes k take one (rows summed over the class's nodes, as the plain extraction);
- e[k, t] >= (a node of a class reading k is labelled t) - (k's node is labelled t), one
  row per reading class; a node in `everywhere` (a constant) counts under every label;
- every picked node in `counted` costs a tie-break (fewer nodes win ties);
- a cycle the picked nodes close is forbidden when a solution uses it, then solved again.

passmgr's PlaceTargets (passmgr/passes/partition/placement/extract.py) says what the labels and
costs are; the model shares its HiGHS set-up (egraph_ir/highs.py) with the extraction ILP.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..highs import Row, add_columns, add_rows, new_highs, run_until
from .cycles import cycles_of
from .graph import ENode, Value

TIE_BREAK = 1e-9  # relative to the costliest choice, per counted node: fewer nodes win ties
MAX_ROUNDS = 50  # solves adding cycle rows before giving up on this e-graph


@dataclass(frozen=True)
class LabelledProblem:
    """Classes with their candidate nodes, each node's {label: cost}, the root, the entry
    cost of a class's value into a label, the result's cost by label, nodes available
    under every label, and nodes that count against ties."""

    classes: dict[Value, list[ENode]]
    options: dict[ENode, dict[str, float]]
    root: Value
    entry: Callable[[Value, str], float]
    result: Callable[[str], float]
    everywhere: frozenset[ENode] = frozenset()
    counted: frozenset[ENode] = frozenset()


def labelled_extraction(
    problem: LabelledProblem, time_limit: float
) -> dict[Value, tuple[ENode, str]] | None:
    """Per picked class its node and label, or None when no solution came in time."""
    column, costs, rows, n_picks, top = _model(problem)
    scale = 1.0 / top
    h = new_highs()
    add_columns(h, [v * scale for v in costs], integral=n_picks)
    add_rows(h, rows)
    deadline = time.perf_counter() + time_limit
    return _cut_cycles(h, column, problem, deadline)


def _model(
    problem: LabelledProblem,
) -> tuple[dict[tuple[ENode, str], int], list[float], list[Row], int, float]:
    """Columns of the (node, label) picks then of the entries, their costs, the rows, the
    number of picks and the largest pick cost (the scale)."""
    import highspy

    classes, options = problem.classes, problem.options
    column: dict[tuple[ENode, str], int] = {}
    costs: list[float] = []
    for c, nodes in classes.items():
        for n in nodes:
            for t, value in options[n].items():
                column[(n, t)] = len(costs)
                costs.append(value + (problem.result(t) if c == problem.root else 0.0))
    n_picks = len(costs)
    top = max([abs(v) for v in costs] + [1e-30])
    for (n, _), j in column.items():
        if n in problem.counted:
            costs[j] += TIE_BREAK * top

    def on(c: Value, t: str | None = None) -> list[tuple[int, float]]:
        """The columns of class c's nodes (labelled t; `everywhere` nodes under any)."""
        return [
            (column[(n, u)], 1.0)
            for n in classes[c]
            for u in options[n]
            if t is None or u == t or n in problem.everywhere
        ]

    inf = highspy.kHighsInf
    rows: list[Row] = [(1.0, 1.0, on(problem.root))]
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
        labels = {t for nodes in by_class.values() for n in nodes for t in options[n]}
        for t in sorted(labels):
            entry = len(costs)
            costs.append(problem.entry(k, t))
            for nodes in by_class.values():
                reading = [(column[(n, t)], -1.0) for n in nodes if t in options[n]]
                if reading:
                    rows.append((0.0, inf, [(entry, 1.0), *on(k, t), *reading]))
    return column, costs, rows, n_picks, top


def _cut_cycles(
    h: Any,
    column: dict[tuple[ENode, str], int],
    problem: LabelledProblem,
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
        if not run_until(h, deadline) or h.getInfo().primal_solution_status != 2:
            return None
        x = h.getSolution().col_value
        picked: dict[Value, tuple[ENode, str]] = {}
        for (n, t), j in column.items():
            if x[j] > 0.5:
                picked[n.eclass] = (n, t)
        cycles = cycles_of({c: n for c, (n, _) in picked.items()}, problem.root)
        if not cycles:
            return picked
        add_rows(
            h,
            [
                (
                    -inf,
                    len(cycle) - 1.0,
                    [(column[(n, t)], 1.0) for n in cycle for t in problem.options[n]],
                )
                for cycle in cycles
            ],
        )
    return None
