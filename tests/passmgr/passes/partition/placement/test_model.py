"""The placement model's launches per region, link costs with routes, memory budgets and
the host's lines in the report (the brute-force property is in test_targets.py)."""

from __future__ import annotations

import numpy as np
import pytest

import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.errors import ConfigError, PassError
from egraph_ir.support import register_support, unregister_support
from egraph_ir.testing import assert_allclose
from passmgr.passes.partition.placement.model import placement_cost, problem_of, region_counts

from .test_targets import COST, mlp_module

OPS = ("exp", "tanh", "add", "relu")


@pytest.fixture
def mock():
    for t in ("mock_p", "mock_q"):
        for name in OPS:
            register_support(t, name)
    yield
    for t in ("mock_p", "mock_q"):
        unregister_support(t)


def _typed(params: list[ir.Var], body: ir.Expr) -> ir.Function:
    return ir.infer_type(ir.IRModule.from_expr(ir.Function(params, body)))["main"]


def _regions(mod: ir.IRModule, target: str) -> int:
    return sum(f.attrs.get("Compiler") == target for f in mod.functions.values())


def test_a_region_reading_two_inputs_pays_one_launch(mock) -> None:
    """add(exp(x0), exp(x1)) on one target is one function, so one launch; charging each
    entering value (the model before) priced it at two and kept small regions home."""
    x0, x1 = ir.var("x0", shape=(4, 4)), ir.var("x1", shape=(4, 4))
    fn = _typed([x0, x1], op.add(op.exp(x0), op.exp(x1)))
    table = {(name, "default"): 3.0 for name in OPS} | {(name, "mock_p"): 1.0 for name in OPS}
    cost = pm.passes.cost_table(table, launch={"mock_p": 5.0})
    problem = problem_of(fn, ["mock_p"], cost)
    everything = dict.fromkeys(problem.calls, "mock_p")
    assert region_counts(problem, everything) == {"mock_p": 1}
    assert placement_cost(problem, everything, cost) == pytest.approx(3 * 1.0 + 5.0)  # < 9 home
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets(["mock_p"], cost=cost, rules="none")(
            ir.IRModule.from_expr(fn)
        )
    assert _regions(placed, "mock_p") == 1 and ctx.run.last("PlaceTargets").cost == 8.0


def test_siblings_reading_one_value_share_their_region_and_launch(mock) -> None:
    x = ir.var("x", shape=(4, 4))
    fn = _typed([x], ir.Tuple([op.exp(x), op.tanh(x)]))
    cost = pm.passes.cost_table({("exp", "mock_p"): 0.0, ("tanh", "mock_p"): 0.0}, {"mock_p": 1.0})
    problem = problem_of(fn, ["mock_p"], cost)
    assert region_counts(problem, dict.fromkeys(problem.calls, "mock_p")) == {"mock_p": 1}


def test_copies_take_the_cheapest_route_through_other_targets(mock) -> None:
    """The host reaches mock_p directly at 1.0 per byte, or through mock_q at 0.01 + 0.01:
    the copy of x into mock_p is priced along the route."""
    x = ir.var("x", shape=(8, 8))  # 256 bytes
    fn = _typed([x], op.exp(x))
    links = {("default", "mock_p"): 1.0, ("default", "mock_q"): 0.01, "mock_q->mock_p": 0.01}
    cost = pm.passes.cost_table(
        {("exp", "default"): 100.0, ("exp", "mock_p"): 1.0}, per_byte=0.5, links=links
    )
    assert cost.copy_per_byte("default", "mock_p") == pytest.approx(0.02)
    assert cost.copy_per_byte("mock_p", "default") == 0.5  # unlisted: per_byte
    problem = problem_of(fn, ["mock_p", "mock_q"], cost)
    on_p = dict.fromkeys(problem.calls, "mock_p")
    assert placement_cost(problem, on_p, cost) == pytest.approx(1.0 + 256 * 0.02 + 256 * 0.5)
    with pytest.raises(ConfigError, match="link costs"):
        pm.passes.cost_table({}, links={"mock_p": 1.0})


def test_a_budget_spills_products_to_the_host_and_the_config_key_sets_it() -> None:
    """Each 512 x 512 product on blas holds its input copied in, its result and its
    weights, 3 MiB; a 6 MiB budget takes two of the three; the program still computes the
    same."""
    mod = mlp_module(512)
    with pm.PassContext(config={"placement.budget": {"blas": 6 << 20}}) as ctx:
        placed = pm.passes.PlaceTargets(["blas"], cost=COST)(mod)
    assert ctx.run.last("PlaceTargets").regions == 2 and _regions(placed, "blas") == 2
    value = np.random.default_rng(0).standard_normal((512, 512)).astype("float32")
    assert_allclose(ir.interpret(placed, value), ir.interpret(mod, value))
    unlimited = pm.passes.PlaceTargets(["blas"], cost=COST)(mod)
    assert _regions(unlimited, "blas") == 3
    assert (
        _regions(pm.passes.PlaceTargets(["blas"], cost=COST, budget={"blas": 0})(mod), "blas") == 0
    )


def test_a_plan_that_cannot_fit_and_a_budget_for_no_target_are_clear_errors() -> None:
    mod = mlp_module(64)
    before = str(mod)
    with pytest.raises(PassError, match="no placement fits the memory budgets"):
        pm.passes.PlaceTargets(["blas"], cost=COST, budget={"default": 1000, "blas": 0})(mod)
    assert str(mod) == before  # nothing half-applied
    with pytest.raises(ConfigError, match="not a target here; targets: default, blas"):
        pm.passes.PlaceTargets(["blas"], cost=COST, budget={"gpu": 1})
    with pytest.raises(ConfigError, match=r"placement\.budget"):
        pm.PassContext(config={"placement.budget": {"blas": -1}})


def test_the_report_has_a_line_for_calls_kept_home_that_a_target_could_run() -> None:
    report = pm.passes.placement_report(mlp_module(8), ["blas"], COST)
    assert report.regions == []
    assert [(r.target, r.ops, r.alternative) for r in report.host] == [
        ("default", ["dense"], "blas")
    ] * 3
    assert all(r.alternative_total > r.total for r in report.host)
    assert str(report).count("rejected blas") == 3
