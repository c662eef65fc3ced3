"""Large-neighbourhood search (lns.py): never costlier than where it starts, acyclic, and on
commutative/associative/distributive e-graphs it finds what greedy-dag misses."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings

import egraph_ir as ir
import rules
from egraph_ir import op
from egraph_ir.egraph import get_cost_model
from egraph_ir.egraph.encode import encode
from egraph_ir.egraph.extract import CostTable, dag_cost, extract, reachable
from egraph_ir.egraph.graph import TensorEGraph
from egraph_ir.egraph.lns import improve
from egraph_ir.egraph.saturate import Limits, saturate
from egraph_ir.errors import CompilerError

from .test_ilp import brute_force, small_egraphs
from .test_saturate import AC

DISTRIBUTE = rules.parse("""
rule distribute [t]
    multiply(?a, add(?b, ?c)) <=> add(multiply(?a, ?b), multiply(?a, ?c))
""")
REWRITES = (AC + DISTRIBUTE).rewrites()


@settings(deadline=None)
@given(small_egraphs())
def test_the_search_never_loses_and_never_beats_brute_force(case) -> None:
    snap, costs = case
    root = "c0"
    try:
        start = extract(None, snap, root, "greedy", costs=costs)
    except CompilerError:
        return  # no acyclic program to start from
    table = CostTable.of(snap, costs)
    # small e-graphs: the neighbourhoods are most of the e-graph, searched all the same
    choice, _ = improve(snap.by_class, costs, root, start.choice, 5.0, whole_share=1.0)
    cost = dag_cost(table, choice, root)  # raises on a cycle
    assert brute_force(snap, costs, root) <= cost <= start.cost


def _polynomial(seed: int) -> ir.Function:
    """30 adds and multiplies over 6 inputs, each reading recent values (much sharing)."""
    rng = random.Random(seed)
    values: list[ir.Expr] = [ir.var(f"x{i}", shape=(16,)) for i in range(6)]
    for _ in range(30):
        a, b = rng.choice(values[-8:]), rng.choice(values[-20:])
        values.append(rng.choice([op.add, op.multiply])(a, b))
    return ir.infer_type(ir.Function(values[:6], values[-1]))


@pytest.mark.parametrize("seed, better_than_input", [(2, False), (3, True), (7, True)])
def test_the_search_recovers_sharing_greedy_dag_loses(seed: int, better_than_input: bool) -> None:
    fn = _polynomial(seed)
    model = get_cost_model("balanced")
    g = TensorEGraph()
    handle = encode(g, fn.body)
    g.flush()
    given_cost = extract(g, g.snapshot(), g.snapshot().handle_class[handle], "greedy", model).cost
    saturate(g, REWRITES, Limits(iterations=50, nodes=800, seconds=30.0))
    snap = g.snapshot()
    root = snap.handle_class[handle]
    start = extract(g, snap, root, "greedy-dag", model)
    table = CostTable(g, snap, model)
    assert given_cost < start.cost  # greedy-dag loses sharing the input program had
    choice, solves = improve(snap.by_class, table.own, root, start.choice, 5.0)
    cost = dag_cost(table, choice, root)
    assert cost <= given_cost
    assert (cost < given_cost) == better_than_input  # distributing found a cheaper one
    assert solves >= 2 and reachable(choice, root)


def test_a_neighbourhood_that_is_most_of_the_egraph_is_left_to_the_whole_ilp() -> None:
    fn = _polynomial(3)
    g = TensorEGraph()
    handle = encode(g, fn.body)
    g.flush()
    saturate(g, REWRITES, Limits(iterations=50, nodes=300, seconds=30.0))
    snap = g.snapshot()
    root = snap.handle_class[handle]
    table = CostTable(g, snap, get_cost_model("balanced"))
    start = extract(g, snap, root, "greedy-dag", costs=table.own).choice
    _, searched = improve(snap.by_class, table.own, root, start, 5.0, whole_share=1.0)
    _, skipped = improve(snap.by_class, table.own, root, start, 5.0, whole_share=0.0)
    assert searched >= 1 and skipped == 0
