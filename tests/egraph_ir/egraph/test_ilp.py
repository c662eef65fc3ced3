"""The exact extractor against brute force on small random e-graphs (cycles included), the
serialized (extraction-gym) format, and the default extractor's guarantees."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rules
from egraph_ir.egraph import get_cost_model, ilp, optimize
from egraph_ir.egraph.encode import encode
from egraph_ir.egraph.extract import CostTable, dag_cost, extract
from egraph_ir.egraph.graph import ENode, Snapshot, TensorEGraph
from egraph_ir.egraph.ilp import prune, solve, total_cost
from egraph_ir.egraph.saturate import Limits, saturate
from egraph_ir.egraph.serialize import extract_serialized, from_json, serialize
from egraph_ir.errors import CompilerError
from egraph_ir.testing import programs


@st.composite
def small_egraphs(draw):
    """Up to 5 classes of 1-3 nodes; children point anywhere (so cycles happen); costs
    are small integers (ties happen)."""
    n_classes = draw(st.integers(1, 5))
    nodes, costs = [], {}
    for c in range(n_classes):
        for k in range(draw(st.integers(1, 3))):
            kids = tuple(draw(st.lists(st.integers(0, n_classes - 1), max_size=2)))
            n = ENode("op", tuple(f"c{x}" for x in kids), (f"{c}.{k}",), f"c{c}")
            nodes.append(n)
            costs[n] = float(draw(st.integers(0, 5)))
    return Snapshot(nodes, {}), costs


def brute_force(snap: Snapshot, costs: dict[ENode, float], root: str) -> float | None:
    """The cheapest acyclic choice by trying every combination."""
    classes = sorted(snap.by_class)
    best = None
    for combo in itertools.product(*(snap.by_class[c] for c in classes)):
        choice = dict(zip(classes, combo, strict=True))
        try:
            cost = dag_cost(CostTable.of(snap, costs), choice, root)
        except CompilerError:
            continue
        best = cost if best is None else min(best, cost)
    return best


@settings(deadline=None)
@given(small_egraphs())
def test_ilp_equals_brute_force(case) -> None:
    snap, costs = case
    root = "c0"
    optimum = brute_force(snap, costs, root)
    if optimum is None:
        with pytest.raises(CompilerError):
            extract(None, snap, root, "ilp", costs=costs)
        return
    result = extract(None, snap, root, "ilp", costs=costs)
    assert result.cost == optimum
    assert result.status == "optimal" and result.gap == 0.0


def test_pruning_drops_self_loops_dominated_and_unextractable_nodes() -> None:
    a = ENode("a", (), ("a",), "x")
    loop = ENode("loop", ("x",), ("loop",), "x")  # x * 1 style: needs its own class
    cheap = ENode("cheap", ("x",), ("cheap",), "r")
    dear = ENode("dear", ("x", "y"), ("dear",), "r")  # costs more, needs more: dominated
    dead = ENode("dead", ("z",), ("dead",), "r")  # z has no nodes
    costs = {a: 1.0, loop: 0.0, cheap: 1.0, dear: 2.0, dead: 0.0}
    y = ENode("y", (), ("y",), "y")
    costs[y] = 1.0
    snap = Snapshot([a, loop, cheap, dear, dead, y], {})
    kept = prune(snap.by_class, costs, "r")
    assert kept == {"r": [cheap], "x": [a]}


@pytest.mark.parametrize("order_rows", [False, True])
def test_lazy_cycle_constraints_break_a_zero_cost_cycle(order_rows: bool, monkeypatch) -> None:
    """r -> {p(x)}; x -> {q(r) free, leaf 3}: the free node would close r -> x -> r. Without
    order rows the first solve closes the cycle and a lazy cut forbids it; with them
    (classes r and x form a cycle of the class graph) no solve can close it."""
    monkeypatch.setattr(ilp, "ORDER_ROWS", order_rows)
    p = ENode("p", ("x",), ("p",), "r")
    q = ENode("q", ("r",), ("q",), "x")
    leaf = ENode("leaf", (), ("leaf",), "x")
    costs = {p: 1.0, q: 0.0, leaf: 3.0}
    snap = Snapshot([p, q, leaf], {})
    warm = {"r": p, "x": leaf}
    outcome = solve(snap.by_class, costs, "r", warm, 5.0)
    assert outcome.choice["x"] is leaf and outcome.status == "optimal"
    assert outcome.rounds == (1 if order_rows else 2)


def saturated_example():
    fn = ir_example()
    g = TensorEGraph()
    root = encode(g, fn.body)
    g.flush()
    saturate(g, rules.builtin("algebraic").rewrites(), Limits(iterations=10, nodes=5000))
    snap = g.snapshot()
    return g, snap, snap.handle_class[root]


def ir_example():
    import numpy as np

    import egraph_ir as ir
    from egraph_ir import op

    x = ir.var("x", shape=(8, 8))
    y = op.add(op.multiply(x, ir.const(np.float32(1))), op.transpose(op.transpose(x)))
    return ir.infer_type(ir.Function([x], op.add(y, op.exp(y))))


def test_serialized_egraphs_round_trip_and_extract_the_same() -> None:
    g, snap, root = saturated_example()
    table = CostTable(g, snap, get_cost_model("balanced"))
    graph = serialize(snap, table.own, root)
    text = json.dumps(graph.to_json())
    back = from_json(json.loads(text))
    assert back.to_json() == graph.to_json()
    for extractor in ("greedy", "greedy-dag", "ilp"):
        ours = extract(g, snap, root, extractor, get_cost_model("balanced"))
        theirs = extract_serialized(back, extractor)
        assert theirs.cost == pytest.approx(ours.cost)


def test_several_roots_and_bad_files() -> None:
    data = {
        "nodes": {
            "a": {"op": "a", "children": [], "eclass": "A", "cost": 1},
            "b": {"op": "b", "children": ["a"], "eclass": "B", "cost": 2},
        },
        "root_eclasses": ["A", "B"],
    }
    assert extract_serialized(from_json(data), "ilp").cost == 3.0
    with pytest.raises(CompilerError, match="not a serialized e-graph"):
        from_json({"nodes": {"a": {"children": []}}, "root_eclasses": ["A"]})
    with pytest.raises(CompilerError, match="root_eclasses"):
        from_json({"nodes": {}, "root_eclasses": ["A"]})


@settings(deadline=None)
@given(programs(max_nodes=8))
def test_the_default_never_returns_a_costlier_program_than_the_input(case) -> None:
    fn = case.mod["main"]
    rewrites = (rules.builtin("algebraic") + rules.builtin("layout")).rewrites()
    result = optimize(fn, rewrites, Limits(iterations=8, nodes=3000, seconds=5.0))
    assert result.extraction is not None
    assert result.cost_after <= result.cost_before
    greedy_dag = result.extraction.candidates.get("greedy-dag")
    assert greedy_dag is None or result.cost_after <= greedy_dag


@settings(deadline=None)
@given(programs(max_nodes=10))
def test_hash_consing_without_the_egraph_equals_the_egraph(case) -> None:
    import egraph_ir as ir
    from egraph_ir.egraph.encode import merge_equal

    fn = case.mod["main"]
    doubled = ir.infer_type(ir.Function(fn.params, ir.Tuple([fn.body, _copy(fn.body)])))
    body, merged = merge_equal(doubled.body)
    via_egraph = optimize(doubled, [], fold_constants=False).function
    assert merged > 0 or isinstance(fn.body, ir.Var | ir.Constant)  # the copy merges
    assert ir.structural_equal(ir.Function(doubled.params, body), via_egraph)


def _copy(e):
    """A structurally equal copy of an expression with no shared nodes above the leaves."""
    import egraph_ir as ir
    from egraph_ir.visitor import post_order, rebuild

    memo = {}
    for node in post_order(e):
        if isinstance(node, ir.Var | ir.Constant):
            memo[node] = node
        else:
            new = rebuild(node, memo)
            memo[node] = new if new is not node else rebuild_fresh(node, memo)
    return memo[e]


def rebuild_fresh(node, memo):
    import egraph_ir as ir

    if isinstance(node, ir.Call):
        return ir.Call(node.op, tuple(memo[a] for a in node.args), node.attrs)
    if isinstance(node, ir.Tuple):
        return ir.Tuple(tuple(memo[f] for f in node.fields))
    if isinstance(node, ir.TupleGetItem):
        return ir.TupleGetItem(memo[node.tuple_value], node.index)
    return node


def test_passes_whose_rules_cannot_match_skip_saturation_on_a_long_chain() -> None:

    import egraph_ir as ir
    import passmgr as pm
    from egraph_ir import op

    x = ir.var("x", shape=(4, 4))
    e = x
    for i in range(20_000):  # negative, exp and relu, but never negative(negative(...))
        e = [op.relu, op.negative, op.exp][i % 3](e)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], e)))
    with pm.PassContext(opt_level=3) as ctx:
        out = pm.Sequential([pm.passes.AlgebraicSimplify(), pm.passes.EliminateCommonSubexpr()])(
            mod
        )
    assert out["main"] is mod["main"]  # nothing to rewrite, nothing to merge
    assert ctx.run.last("AlgebraicSimplify").skipped  # no e-graph built
    assert ctx.run.last("EliminateCommonSubexpr").merged == 0


def test_implied_classes_are_what_every_acyclic_program_uses() -> None:
    """c0 has two nodes, one needing c1 and c2, the other c1 and c3: c1 is implied, c2 and
    c3 are not. c4's only other node needs c4 itself through c5 (a cycle): only its leaf
    node makes a program, so nothing but c4 is implied there."""
    from egraph_ir.egraph.ilp import extractable, implied_classes

    def node(c: int, *kids: int, tag: str = "") -> ENode:
        return ENode("op", tuple(f"c{k}" for k in kids), (f"{c}{tag}",), f"c{c}")

    nodes = [
        node(0, 1, 2), node(0, 1, 3, tag="b"), node(1), node(2), node(3),
        node(4), node(4, 5, tag="b"), node(5, 4), node(6, 0, 4),
    ]  # fmt: skip
    classes = extractable(Snapshot(nodes, {}).by_class, "c6")
    implied = implied_classes(classes)
    assert implied["c0"] == {"c0", "c1"}
    assert implied["c4"] == {"c4"} and implied["c5"] == {"c5", "c4"}
    assert implied["c6"] == {"c6", "c0", "c1", "c4"}
    assert implied_classes(classes, limit=3) == {}  # past the limit: no rows at all


def test_a_negative_node_no_program_uses_does_not_make_a_false_optimum() -> None:
    """x takes `cheap` (a leaf) or `dear` (which needs y, whose node costs -100). The
    integer program can pick y's node without using it, so its objective (cheap - 100)
    is below every program's cost: the answer must not be called optimal (issue #34)."""
    cheap = ENode("cheap", (), ("cheap",), "x")
    dear = ENode("dear", ("y",), ("dear",), "x")
    gift = ENode("gift", (), ("gift",), "y")
    top = ENode("top", ("x",), ("top",), "r")
    costs = {cheap: 1.0, dear: 5.0, gift: -100.0, top: 1.0}
    snap = Snapshot([cheap, dear, gift, top], {})
    outcome = solve(snap.by_class, costs, "r", {"r": top, "x": cheap}, 5.0)
    program = total_cost(outcome.choice, costs, "r")
    if outcome.status == "optimal":  # then it must be the real optimum: top, dear, gift
        assert program == pytest.approx(-94.0)
    else:
        assert outcome.lower_bound is not None and outcome.lower_bound <= program
