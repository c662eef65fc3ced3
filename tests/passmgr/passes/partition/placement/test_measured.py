"""PlaceTargets with a cost model that can measure: candidates are run, the model is
calibrated from the runs, and the fastest placement wins (passmgr/passes/partition/placement/measured.py). The runs here
are a known "true" cost of the partitioned module, so the expected choice is exact."""

from __future__ import annotations

import numpy as np
import pytest

import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.expr import Call, GlobalVar
from egraph_ir.support import register_support, unregister_support
from egraph_ir.testing import assert_allclose
from egraph_ir.visitor import post_order

MOCK = "mock_measured"
SUPPORTED = ("exp", "tanh", "negative", "sigmoid", "relu")


@pytest.fixture(scope="module")
def mock_target():
    for name in SUPPORTED:
        register_support(MOCK, name)
    yield MOCK
    unregister_support(MOCK)


def _true_seconds(mod: ir.IRModule, host_op: float, mock_op: float, launch: float) -> float:
    """What a partitioned module "really" costs: host ops, and per mock region one launch
    and its ops."""
    total = 0.0
    for fn in mod.functions.values():
        calls = [
            n
            for n in post_order(fn.body)
            if isinstance(n, Call) and not isinstance(n.op, GlobalVar)
        ]
        if fn.attrs.get("Compiler") == MOCK:
            total += launch + mock_op * len(calls)
        else:
            total += host_op * len(calls)
    return total


def _model(mock_op: float, launch: float, measure=None) -> pm.passes.PlacementCost:
    table = {(name, "default"): 5.0 for name in (*SUPPORTED, "sqrt")}
    table.update({(name, MOCK): mock_op for name in SUPPORTED})
    cost = pm.passes.cost_table(table, launch={MOCK: launch})
    return pm.passes.PlacementCost(cost.op, cost.launch, cost.per_byte, measure)


def _program() -> ir.IRModule:
    """Six ops the mock runs, one it cannot (sqrt), then one more it runs."""
    x = ir.var("x", shape=(4, 4))
    h = op.relu(op.sigmoid(op.negative(op.tanh(op.exp(x)))))
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.exp(op.sqrt(op.relu(h))))))


def test_a_calibrated_mixed_placement_beats_every_single_target_build(mock_target) -> None:
    # truth: mock ops cost 1 (the model says 6), a launch 10; host ops 5.
    # host only 8 * 5 = 40; first fit 32 (regions of six and one op: 16 + 5 + 11); the best:
    # the chain of six on the mock, the rest home, 10 + 6 + 5 + 5 = 26
    runs: list[int] = []

    def measure(modules):
        runs.append(len(modules))
        return [_true_seconds(m, 5.0, 1.0, 10.0) for m in modules]

    mod = _program()
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets([mock_target], cost=_model(6.0, 10.0, measure))(mod)
    choice = ctx.run.last("PlaceTargets", pm.passes.PlacementChoice)
    assert choice.chosen == "calibrated"
    assert (choice.measured_ms["host"], choice.measured_ms[MOCK]) == (40e3, 32e3)
    assert choice.measured_ms["calibrated"] == 26e3
    assert _true_seconds(placed, 5.0, 1.0, 10.0) == 26.0
    assert runs == [3, 2]  # placed, host, first fit; then the best of those and the calibrated
    value = np.random.default_rng(0).random((4, 4)).astype("float32")
    assert_allclose(ir.interpret(placed, value), ir.interpret(mod, value))


def test_a_run_overrules_the_model_when_a_single_target_is_faster(mock_target) -> None:
    # the model keeps everything home (mock ops cost 6); truth: mock ops are free and a
    # launch costs 1, so first fit (two regions, 2 + 5 for sqrt) beats host (40)
    mod = _program()
    measure = lambda modules: [_true_seconds(m, 5.0, 0.0, 1.0) for m in modules]  # noqa: E731
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets([mock_target], cost=_model(6.0, 10.0, measure))(mod)
    choice = ctx.run.last("PlaceTargets", pm.passes.PlacementChoice)
    assert choice.cost == pytest.approx(40.0)  # the model's own answer: all on the host
    assert _true_seconds(placed, 5.0, 0.0, 1.0) == 7.0
    assert choice.chosen in ("calibrated", MOCK)


def test_without_a_measure_the_model_decides_alone(mock_target) -> None:
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets([mock_target], cost=_model(6.0, 10.0))(_program())
    assert ctx.run.last("PlaceTargets", pm.passes.PlacementChoice).chosen == ""
    assert len(placed.functions) == 1  # all on the host, as the model says


def test_runs_that_fail_leave_the_models_placement(mock_target) -> None:
    from egraph_ir.errors import CompilerError

    def measure(modules):
        raise CompilerError("cannot feed this program")

    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets([mock_target], cost=_model(6.0, 10.0, measure))(_program())
    choice = ctx.run.last("PlaceTargets", pm.passes.PlacementChoice)
    assert (choice.chosen, choice.runs_failed) == ("placed", True)
    assert len(placed.functions) == 1  # the model's answer: all on the host
