"""The compile job behind `egc compile`: what it does to a module along the way."""

from __future__ import annotations

from collections import Counter

import pytest

from egc.job import JobOptions, run_job
from egraph_ir import infer


def test_a_module_is_type_inferred_once_per_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary, the optimisation and binding parameters all need checked types; a
    module records that it has them, so no module is walked twice."""
    walks: Counter[int] = Counter()
    real = infer._infer_module

    def counting(mod):  # type: ignore[no-untyped-def]
        walks[id(mod)] += 1
        return real(mod)

    monkeypatch.setattr(infer, "_infer_module", counting)
    report, _ = run_job("mlp", JobOptions(repeats=1))
    assert report.ok and walks
    assert max(walks.values()) == 1, walks.most_common(3)


def test_the_compile_cache_and_the_compiler_share_one_cache_folder() -> None:
    """egc's compile cache computes the folder without importing the compiler; it is the
    one egraph_ir/cache.py gives every measurement."""
    from egc.compile_cache import cache_root as compile_cache_root
    from egraph_ir.cache import cache_root

    assert compile_cache_root() == cache_root()


def test_the_report_is_typed_and_its_json_reads_back() -> None:
    """A frozen CompileReport; JSON only at to_json(), and from_json reads it back (a
    compile cache hit) to the same report."""
    import dataclasses

    from egc.report import CompileReport

    report, _ = run_job("mlp", JobOptions(check=True, repeats=1))
    assert isinstance(report, CompileReport) and report.ok
    assert report.check_original is not None and report.check_original.within_tolerance
    data = report.to_json()
    assert data["check_original"]["exactness"] and "onnxruntime" not in data
    assert CompileReport.from_json(data) == report
    kept = report.without_run()
    assert kept.latency_ms is None and "latency_ms" not in kept.to_json()
    try:
        report.ok = False  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("the report is frozen")
