"""Every extractor against brute force on random serialized e-graphs with sharing, cycles,
several roots and negative and zero costs (issue #34): each answer is a valid program, costs
what it says, is never below the optimum, and is labelled `optimal` only when it is one;
a proven lower bound is never above the optimum."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_ir.egraph.extract import EXTRACTORS, CostTable, dag_cost
from egraph_ir.egraph.serialize import ROOT, SerializedEGraph, extract_serialized, from_json
from egraph_ir.errors import CompilerError


@st.composite
def gym_egraphs(draw: Any) -> dict[str, Any]:
    """Up to 6 classes of 1-3 nodes in extraction-gym's JSON; children point anywhere (so
    sharing and cycles happen), 1-2 roots, integer costs from -6 to 6 (ties and zeros)."""
    n_classes = draw(st.integers(1, 6))
    ids = [[f"n{c}.{k}" for k in range(draw(st.integers(1, 3)))] for c in range(n_classes)]
    negative = draw(st.booleans())
    low = -6 if negative else 0
    nodes = {}
    for c, members in enumerate(ids):
        for node_id in members:
            kids = draw(st.lists(st.integers(0, n_classes - 1), max_size=3))
            nodes[node_id] = {
                "op": "f",
                "children": [draw(st.sampled_from(ids[k])) for k in kids],
                "eclass": f"c{c}",
                "cost": float(draw(st.integers(low, 6))),
            }
    roots = draw(st.lists(st.integers(0, n_classes - 1), min_size=1, max_size=2, unique=True))
    return {"nodes": nodes, "root_eclasses": [f"c{r}" for r in roots]}


def brute_force(graph: SerializedEGraph) -> float | None:
    """The cheapest acyclic program for the roots, by trying every combination."""
    by_class = graph.snapshot.by_class
    classes = sorted(by_class)
    table = CostTable.of(graph.snapshot, graph.costs)
    best = None
    for combo in itertools.product(*(by_class[c] for c in classes)):
        try:
            cost = dag_cost(table, dict(zip(classes, combo, strict=True)), graph.root)
        except CompilerError:
            continue
        best = cost if best is None else min(best, cost)
    return best


@settings(deadline=None, max_examples=60)
@given(gym_egraphs(), st.sampled_from(EXTRACTORS))
def test_every_extractor_is_honest_against_brute_force(data: dict[str, Any], name: str) -> None:
    graph = from_json(data)
    optimum = brute_force(graph)
    if optimum is None:
        with pytest.raises(CompilerError):
            extract_serialized(graph, name, time_limit=5.0)
        return
    result = extract_serialized(graph, name, time_limit=5.0)
    table = CostTable.of(graph.snapshot, graph.costs)
    assert dag_cost(table, result.choice, graph.root) == result.cost  # valid and as reported
    assert result.cost >= optimum
    if result.status == "optimal":
        assert result.cost == optimum, f"{name} called {result.cost} optimal, {optimum} exists"
    if result.lower_bound is not None:
        assert result.lower_bound <= optimum + 1e-9
    if name in ("ilp", "auto"):  # the exact extractors prove these tiny e-graphs
        assert result.status == "optimal" and result.cost == optimum


def test_a_negative_cycle_does_not_hang_the_greedy_extractors() -> None:
    """A cycle of negative total cost (a -> b -> a, -5 each) beside a leaf: tree costs
    along the cycle fall forever unless negative costs are handled."""
    data = {
        "nodes": {
            "leaf": {"op": "x", "children": [], "eclass": "a", "cost": 1.0},
            "a2": {"op": "f", "children": ["b1"], "eclass": "a", "cost": -5.0},
            "b1": {"op": "g", "children": ["leaf"], "eclass": "b", "cost": -5.0},
            "top": {"op": "h", "children": ["b1"], "eclass": "r", "cost": 1.0},
        },
        "root_eclasses": ["r"],
    }
    graph = from_json(data)
    for name in EXTRACTORS:
        result = extract_serialized(graph, name, time_limit=5.0)
        assert result.cost == pytest.approx(-3.0)  # top, b1, leaf
    assert ROOT not in graph.snapshot.by_class  # one root: no synthetic root class


class _Clock:
    """A clock that moves `step` seconds each time it is read (no wall-clock assertion)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_every_phase_counts_against_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a clock that passes the limit at its first reading after the start, greedy-dag
    gives up and says so, neither the search nor the ILP starts, and greedy's answer comes
    back labelled a heuristic with the budget it was given."""
    import sys

    from egraph_ir.egraph import ilp, lns

    extract_module = sys.modules["egraph_ir.egraph.extract"]  # the package re-exports a function

    nodes = {
        f"n{c}.{k}": {"op": "f", "children": [f"n{c + 1}.0"] if c < 9 else [],
                      "eclass": f"c{c}", "cost": float(k + 1)}
        for c in range(10) for k in range(2)
    }  # fmt: skip
    graph = from_json({"nodes": nodes, "root_eclasses": ["c0"]})
    clock = _Clock(10.0)
    for module in (extract_module, ilp, lns):
        monkeypatch.setattr(module, "time", clock)
    result = extract_serialized(graph, "auto", time_limit=5.0)
    assert result.time_limit == 5.0
    assert result.extractor == "greedy" and result.status == "heuristic"
    assert any("greedy-dag gave up (out of time)" in note for note in result.notes)
    assert result.cost == 10.0  # the cheapest node everywhere: greedy is optimal here
