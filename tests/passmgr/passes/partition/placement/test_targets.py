"""PlaceTargets: cost-optimal placement against brute force, greedy and hand-computed costs."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.errors import ConfigError, PassError
from egraph_ir.support import register_support, unregister_support
from egraph_ir.testing import assert_allclose
from passmgr.passes.partition.placement.model import greedy_placement, placement_cost, problem_of
from passmgr.passes.partition.placement.solve import solve

MOCKS = ("mock_a", "mock_b", "mock_c")


def mlp_module(n: int) -> ir.IRModule:
    """Three dense + relu layers of n x n (also used by tests/codegen/measure/test_placement_costs.py)."""
    rng = np.random.default_rng(n)
    x = ir.var("x", shape=(n, n))
    h: ir.Expr = x
    for _ in range(3):
        h = op.relu(op.dense(h, ir.const((rng.standard_normal((n, n)) * 0.05).astype("float32"))))
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], h)))


def _flops(call: ir.Call) -> float:
    a, w = (arg.checked_type.shape for arg in call.args)
    return 2.0 * a[0] * w[0] * w[1]


# the host at 1 GFLOP/s, blas at 20 GFLOP/s, a 5 us launch, 0.1 ns per byte copied
COST = pm.passes.cost_table(
    {
        ("dense", "default"): lambda c: _flops(c) / 1e9,
        ("dense", "blas"): lambda c: _flops(c) / 2e10,
    },
    launch={"blas": 5e-6},
    per_byte=1e-10,
)


def test_a_small_mlp_stays_on_the_host_and_a_large_one_sends_its_products_out() -> None:
    small = mlp_module(8)
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets(["blas"], cost=COST)(small)
    stats = ctx.run.last("PlaceTargets", pm.passes.PlacementChoice)
    assert stats.cost == pytest.approx(3 * 2 * 8**3 / 1e9)  # three products on the host
    assert stats.regions == 0 and len(placed.functions) == 1
    assert stats.greedy_cost > stats.cost  # greedy pays three launches

    large = mlp_module(512)
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets(["blas"], cost=COST)(large)
    stats = ctx.run.last("PlaceTargets", pm.passes.PlacementChoice)
    copy = 512 * 512 * 4 * 1e-10
    # three products on blas; x and two relu results enter blas, three products come back
    expected = 3 * 2 * 512**3 / 2e10 + 3 * (5e-6 + copy) + 3 * copy
    assert stats.cost == pytest.approx(expected)
    assert stats.greedy_cost == pytest.approx(expected)  # greedy is right here: agree
    assert stats.regions == 3 and len(placed.functions) == 4
    value = np.random.default_rng(0).standard_normal((512, 512)).astype("float32")
    assert_allclose(codegen.build(placed)(value), ir.interpret(large, value))


def test_budgets_count_the_weights_a_target_holds() -> None:
    """reliability-4: four products with 4, 2, 2 and 2 MiB of weights and a 6.5 MiB budget
    on blas all went there (10 MiB of weights: the budget counted computed and copied
    values only). Now what blas holds, weights included, stays within its budget: two or
    three of the products go, never all four."""
    rng = np.random.default_rng(0)
    x = ir.var("x", shape=(64, 1024))
    h: ir.Expr = x
    width = 1024
    for rows in (1024, 512, 1024, 512):  # weights of 4 MiB, then three of 2 MiB
        h = op.dense(h, ir.const((rng.standard_normal((rows, width)) * 0.03).astype("float32")))
        width = rows
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], h)))
    budget = int(6.5 * 2**20)
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets(["blas"], cost=COST, budget={"blas": budget})(mod)
    regions = [fn for name, fn in placed.items() if name != "main"]
    weights = [
        sum(c.data.nbytes for c in ir.post_order(fn.body) if isinstance(c, ir.Constant))
        for fn in regions
    ]
    products = sum(
        isinstance(c, ir.Call) and c.op is op.get("dense")
        for fn in regions
        for c in ir.post_order(fn.body)
    )
    assert 2 <= products <= 3 and sum(weights) <= budget, weights
    assert ctx.run.last("PlaceTargets", pm.passes.PlacementChoice).cost < float("inf")


def test_the_report_names_each_region_and_its_best_rejected_alternative() -> None:
    report = pm.passes.placement_report(mlp_module(512), ["blas"], COST)
    assert [r.target for r in report.regions] == ["blas"] * 3
    assert all(r.alternative == "default" and r.alternative_total > r.total for r in report.regions)
    copy = 512 * 512 * 4 * 1e-10  # each region: its product, one launch and its input's copy
    assert [r.cost for r in report.regions] == pytest.approx([2 * 512**3 / 2e10 + 5e-6 + copy] * 3)
    data = json.loads(report.to_json())
    assert data["cost"] == pytest.approx(report.cost) and len(data["regions"]) == 3
    assert "rejected default" in str(report)


@pytest.fixture(scope="module")
def mock_targets():
    ops = ("add", "multiply", "exp", "tanh", "relu", "negative", "subtract", "sigmoid")
    for t in MOCKS:
        for name in ops:
            register_support(t, name)
    yield ops
    for t in MOCKS:
        unregister_support(t)


@st.composite
def _costs(draw, ops: tuple[str, ...], tables: bool = False):
    """A random cost table: each op costs 0-9 on the host and each mock target (or is not
    supported there), launches 0-20, copies 0-2 per 1,000 bytes. With `tables`, also
    link costs for some target pairs (0-5 per 1,000 bytes, so routes through a third
    target can win) and budgets of 0-200 bytes for some targets (each (2, 3) float32
    value is 24 bytes), the host included."""
    table = {}
    for name in ops:
        table[(name, "default")] = float(draw(st.integers(0, 9)))
        for t in MOCKS:
            if draw(st.booleans()):
                table[(name, t)] = float(draw(st.integers(0, 9)))
    launch = {t: float(draw(st.integers(0, 20))) for t in MOCKS}
    links: dict[tuple[str, str], float] = {}
    budget: dict[str, int] = {}
    if tables:
        places = ("default", *MOCKS)
        for pair in itertools.permutations(places, 2):
            if draw(st.integers(0, 2)) == 0:
                links[pair] = draw(st.integers(0, 5)) / 1000
        for t in places:
            if draw(st.integers(0, 3)) == 0:
                budget[t] = draw(st.integers(0, 200))
    per_byte = draw(st.integers(0, 2)) / 1000
    return pm.passes.cost_table(table, launch, per_byte, links=links, budget=budget)


UNARY = ("exp", "tanh", "relu", "negative", "sigmoid")
BINARY = ("add", "multiply", "subtract")


@st.composite
def _dags(draw, max_ops: int = 12) -> ir.Function:
    """A random DAG of 4 to max_ops elementwise calls over two inputs, some reading a
    constant (a weight the budgets count); a value may feed several calls; every call no
    other call reads is a result (a tuple of them)."""
    xs = [ir.var("x0", shape=(2, 3)), ir.var("x1", shape=(2, 3))]
    values: list[ir.Expr] = list(xs)
    read: set[ir.Expr] = set()
    for _ in range(draw(st.integers(4, max_ops))):
        args = [draw(st.sampled_from(values)) for _ in range(draw(st.integers(1, 2)))]
        if len(args) == 2 and draw(st.integers(0, 3)) == 0:  # a weight bound into the call
            args[1] = ir.const(np.full((2, 3), draw(st.integers(1, 5)), "float32"))
        name = draw(st.sampled_from(UNARY if len(args) == 1 else BINARY))
        read.update(args)
        values.append(op.call(name, *args))
    sinks = [v for v in values[2:] if v not in read]
    body = sinks[0] if len(sinks) == 1 else ir.Tuple(sinks)
    return ir.infer_type(ir.IRModule.from_expr(ir.Function(xs, body)))["main"]


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_placement_is_the_brute_force_optimum_and_never_above_greedy(mock_targets, data) -> None:
    """Also with link costs (multi-hop routes) and budgets: the solver's placement costs
    what the cheapest of every placement costs under the model (one launch per region, one
    copy per value and target along its cheapest route, infinity over a budget); when no
    placement fits the budgets, the solver says so."""
    fn = data.draw(_dags())
    cost = data.draw(_costs(mock_targets, tables=True))
    targets = MOCKS[: data.draw(st.integers(2, 3))]
    cost = replace(
        cost, budget={t: b for t, b in cost.budget.items() if t in {*targets, "default"}}
    )
    problem = problem_of(fn, targets, cost)
    options = [sorted(problem.choices[c]) for c in problem.calls]
    if np.prod([len(o) for o in options]) > 20_000:
        return  # brute force too slow; the case is drawn again smaller
    best = min(
        placement_cost(problem, dict(zip(problem.calls, pick, strict=True)), cost)
        for pick in itertools.product(*options)
    )
    if best == float("inf"):
        with pytest.raises(PassError, match="no placement fits the memory budgets"):
            solve(problem, cost)
        return
    place = solve(problem, cost)
    assert placement_cost(problem, place, cost) == pytest.approx(best)
    greedy = placement_cost(problem, greedy_placement(problem, targets), cost)
    assert placement_cost(problem, place, cost) <= greedy + 1e-9  # inf when over budget


def test_placed_programs_partition_without_cycles_and_match_the_interpreter(mock_targets) -> None:
    """Mock targets have no code generator: the partitioned module runs in the interpreter."""
    x = ir.var("x", shape=(4, 8))
    a = op.exp(x)
    b = op.add(op.tanh(a), op.negative(a))  # a diamond: both paths on the cheap target
    body = op.multiply(op.sigmoid(b), a)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], body)))
    table = {(name, "mock_a"): 1.0 for name in mock_targets}
    table.update({(name, "default"): 5.0 for name in mock_targets})
    cost = pm.passes.cost_table(table, launch={"mock_a": 2.0}, per_byte=0.0)
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets(["mock_a"], cost=cost)(mod)
    # all six ops on mock_a: one entry (x) and the result back: 6 * 1 + 2
    assert ctx.run.last("PlaceTargets").cost == pytest.approx(8.0)
    regions = [f for f in placed.functions.values() if f.attrs.get("Compiler") == "mock_a"]
    assert len(regions) == 1
    value = np.random.default_rng(1).standard_normal((4, 8)).astype("float32")
    assert_allclose(ir.interpret(placed, value), ir.interpret(mod, value))


def test_bad_arguments_are_config_errors_and_the_defaults_keep_everything_home() -> None:
    with pytest.raises(ConfigError, match="needs target names"):
        pm.passes.PlaceTargets(["blas", ""], cost=COST)
    with pytest.raises(ConfigError, match="is a PlacementCost"):
        pm.passes.PlaceTargets(["blas"], cost={"dense": 1.0})  # type: ignore[arg-type]
    default = pm.passes.PlaceTargets()  # every registered target, the nominal model
    assert "blas" in default.targets and "onnxruntime" in default.targets
    with pm.PassContext() as ctx:
        default(mlp_module(64))
    assert ctx.run.last("PlaceTargets").regions == 0  # equal op costs: no launch pays


def test_a_field_of_a_tuple_producing_call_lives_where_the_call_runs() -> None:
    """batch_norm returns a tuple and its users read `%bn.0`: the field is where the batch
    norm runs, not a value on the host that costs a launch to enter every region (as
    imported, a DenseNet got no region at all)."""
    ops = ("conv2d", "batch_norm", "relu", "add")
    for name in ops:
        register_support("mock_bn", name)
    try:
        x = ir.var("x", shape=(1, 4, 8, 8))
        rng = np.random.default_rng(0)
        h = x
        for _ in range(3):
            w = ir.const(rng.standard_normal((4, 4, 3, 3)).astype("float32"))
            stats = [ir.const(rng.uniform(0.5, 1.5, 4).astype("float32")) for _ in range(4)]
            conv = op.conv2d(h, w, padding=[1, 1, 1, 1])
            h = op.relu(ir.TupleGetItem(op.batch_norm(conv, *stats), 0))
        mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], h)))
        table = {(name, "default"): 2.0 for name in ops}
        table.update({(name, "mock_bn"): 1.0 for name in ops})  # every op at half cost
        cost = pm.passes.cost_table(table, launch={"mock_bn": 2.0}, per_byte=0.0)
        with pm.PassContext() as ctx:
            placed = pm.passes.PlaceTargets(["mock_bn"], cost=cost, rules="none")(mod)
    finally:
        unregister_support("mock_bn")
    regions = [f for f in placed.functions.values() if f.attrs.get("Compiler") == "mock_bn"]
    assert len(regions) == 1  # the whole chain, one launch
    choice = ctx.run.last("PlaceTargets")
    # the model sees the region that is built: 9 ops at 1 and one entry (it saw 3 regions
    # and charged 16 when every `.0` counted as a host value)
    assert choice.regions == 1 and choice.cost == pytest.approx(9 * 1.0 + 2.0)
    value = rng.standard_normal((1, 4, 8, 8)).astype("float32")
    assert_allclose(ir.interpret(placed, value), ir.interpret(mod, value))


@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_the_regions_the_report_explains_are_the_regions_built(mock_targets, data) -> None:
    """On random DAGs and costs, the placement report's regions (target and ops) are the
    functions MergeCompilerRegions and PartitionGraph build; siblings that share only an
    input were one entry in the model and two functions in the module."""
    fn = data.draw(_dags(max_ops=8))
    cost = data.draw(_costs(mock_targets))
    targets = MOCKS[:2]
    mod = ir.IRModule.from_expr(fn)
    report = pm.passes.placement_report(mod, targets, cost, rules="none")
    placed = pm.passes.PlaceTargets(targets, cost=cost, rules="none")(mod)
    built = sorted(
        (
            str(f.attrs["Compiler"]),
            sorted(n.op.name for n in ir.post_order(f.body) if isinstance(n, ir.Call)),
        )
        for f in placed.functions.values()
        if f.attrs.get("Compiler")
    )
    explained = sorted((r.target, sorted(r.ops)) for r in report.regions)
    assert explained == built
