"""codegen.measured_cost: a placement cost model timed on this machine and cached."""

from __future__ import annotations

import numpy as np

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.testing import assert_allclose

from ..passmgr.passes.test_place_targets import mlp_module


def test_measured_costs_are_cached_per_cpu_and_drive_a_placement(tmp_path, monkeypatch) -> None:
    """No timing is asserted (machines are noisy): only that every number is measured once,
    kept in the cache file, and that the placement built from them runs correctly."""
    from codegen import placement_costs

    cache = tmp_path / "costs.json"
    cost = codegen.measured_cost(cache=cache, budget_s=0.002)
    mod = mlp_module(64)
    dense = next(
        n for n in ir.post_order(mod["main"].body) if getattr(n, "op", None) is op.get("dense")
    )
    for target in ("default", "blas", "onnxruntime"):
        seconds = cost.op(dense, target)
        assert seconds is not None and seconds >= 0.0
    assert cost.launch_of("blas") > 0.0 and cost.launch_of("default") == 0.0
    assert cost.op(dense, "no_such_target") is None
    first = pm.passes.placement_report(mod, ["blas", "onnxruntime"], cost)  # times every call

    def no_timing(*args, **kwargs):
        raise AssertionError("measured again instead of read from the cache")

    monkeypatch.setattr(placement_costs, "_time_call", no_timing)
    again = codegen.measured_cost(cache=cache)
    assert again.op(dense, "blas") == cost.op(dense, "blas")
    assert pm.passes.placement_report(mod, ["blas", "onnxruntime"], again).cost == first.cost
    with pm.PassContext() as ctx:  # candidates are built and run; the fastest is kept
        placed = pm.passes.PlaceTargets(["blas", "onnxruntime"], cost=again)(mod)
    stats = ctx.statistics["PlaceTargets"]
    runs = {k: v for k, v in stats.items() if k.startswith("measured ms: ")}
    assert {"measured ms: host", "measured ms: blas", "measured ms: placed"} <= runs.keys()
    assert all(v > 0 for v in runs.values())
    assert sum(v for k, v in stats.items() if k.startswith("chosen: ")) == 1
    value = np.random.default_rng(2).standard_normal((64, 64)).astype("float32")
    assert_allclose(codegen.build(placed)(value), ir.interpret(mod, value))
