"""codegen.measured_cost: a placement cost model timed on this machine and cached."""

from __future__ import annotations

import numpy as np

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.testing import assert_allclose

from ...passmgr.passes.partition.placement.test_targets import mlp_module


def test_measured_costs_are_cached_per_cpu_and_drive_a_placement(tmp_path, monkeypatch) -> None:
    """No timing is asserted (machines are noisy): only that every number is measured once,
    kept in the cache file, and that the placement built from them runs correctly."""
    from codegen.measure import placement_costs

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
    choice = ctx.run.last("PlaceTargets", pm.passes.PlacementChoice)
    assert {"host", "blas", "placed"} <= choice.measured_ms.keys()
    assert all(v > 0 for v in choice.measured_ms.values())
    assert choice.chosen in choice.measured_ms
    value = np.random.default_rng(2).standard_normal((64, 64)).astype("float32")
    assert_allclose(codegen.build(placed)(value), ir.interpret(mod, value))


def test_measured_placement_builds_as_the_compile_was_asked(tmp_path, monkeypatch) -> None:
    """`egc compile --place measured --config codegen.num_threads=1 --opt-level 2`: every
    build the measurement makes (one-op timings and whole candidates) runs in a context
    derived from the user's: one thread, opt level 2."""
    import sys

    from codegen.measure import placement_costs
    from egc.cli.main import main

    monkeypatch.setenv("EGC_COST_CACHE", str(tmp_path / "costs.json"))  # measure afresh
    seen: list[tuple[int, int]] = []
    build_module = sys.modules["codegen.build"]  # `codegen.build` is the function
    real_build = build_module.build

    def spy_build(*args, **kwargs):
        ctx = pm.PassContext.current()
        seen.append((ctx.opt_level, int(ctx.get_config("codegen.num_threads"))))
        return real_build(*args, **kwargs)

    external_threads: list[int] = []
    real_get = placement_costs.get_external

    def spy_get(target):
        codegen_fn = real_get(target)

        def wrapped(region, threads):
            external_threads.append(threads)
            return codegen_fn(region, threads)

        return wrapped

    monkeypatch.setattr(build_module, "build", spy_build)
    monkeypatch.setattr(placement_costs, "get_external", spy_get)
    args = ["compile", "mlp", "--targets", "blas", "--place", "measured", "--repeats", "1"]
    args += ["--config", "codegen.num_threads=1", "--opt-level", "2"]
    assert main(args) == 0
    assert len(seen) > 3  # one-op timings and the candidates
    assert set(seen) == {(2, 1)}
    assert external_threads and set(external_threads) == {1}
