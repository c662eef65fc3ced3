"""The reproductions of issue #34 on the public extraction benchmark's files (skipped where
`../shared/extraction-gym` is absent): the e-graphs that got a false `optimal` label and a
negative-cost one, each answer re-checked against the raw file."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from egraph_ir.egraph.serialize import ROOT, extract_serialized, load, read_json

ROOT_DIR = Path(__file__).resolve().parents[3]
GYM = ROOT_DIR.parent / "shared" / "extraction-gym"
pytestmark = pytest.mark.skipif(not GYM.exists(), reason="no ../shared/extraction-gym here")


def _runner():
    """benchmarks/extraction_gym.py, whose `check` re-reads a choice against the raw JSON."""
    spec = importlib.util.spec_from_file_location("gym", ROOT_DIR / "benchmarks/extraction_gym.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _best(name: str) -> float:
    with open(GYM / "best_known.csv") as f:
        return next(float(r["best_known_cost"]) for r in csv.DictReader(f) if r["file"] == name)


@pytest.mark.parametrize(
    "name",
    [
        "eggcc-bril/gamma_condition_and.bril.json.gz",  # was "optimal" at 44; 43 exists
        "eggcc-bril/block-diamond.bril.json.gz",  # was "optimal" at 72; 70 exists
        "maxsat/maxcut-140-630-0.7-1.json.gz",  # was "optimal" at -785; -1,098 exists
    ],
)
def test_labels_on_the_benchmark_files_are_honest(name: str) -> None:
    runner = _runner()
    path = GYM / name
    # twice the 3 s that sufficed alone: with 3 s, maxcut run beside the rest of the suite
    # stopped at -630 (the assertion below asks for -1,043 or less)
    result = extract_serialized(load(path), "auto", time_limit=6.0)
    chosen = {c: n.literals[0] for c, n in result.choice.items() if c != ROOT}
    cost = runner.check(read_json(path), chosen)  # valid, and what it costs
    assert cost == pytest.approx(result.cost)
    best = _best(name)
    if result.status == "optimal":
        assert cost <= best + 1e-6 * abs(best)
    assert result.lower_bound is None or result.lower_bound <= best + 1e-6 * abs(best)
    if name.startswith("maxsat"):
        assert cost <= 0.95 * best  # the negative nodes are bought (the old false optimum: -785)


def _spin() -> None:
    while True:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("extractor", ["ilp", "auto"])
def test_a_limit_met_beside_a_busy_neighbour_still_gives_a_checked_answer(extractor: str) -> None:
    """Issue #52: a CPU-bound process beside the extraction (both cores busy with this
    suite's own work). The largest file cannot be solved in 1 s: the extractor stops at
    its limit, says so, and the answer it keeps is valid and costs what it claims. How
    long past the limit runs go is measured (benchmarks/deadlines.py), not asserted."""
    import multiprocessing as mp

    runner = _runner()
    path = max(GYM.glob("*/*.json.gz"), key=lambda p: p.stat().st_size)
    neighbour = mp.get_context("spawn").Process(target=_spin, daemon=True)
    neighbour.start()
    try:
        result = extract_serialized(load(path), extractor, time_limit=1.0)
    finally:
        neighbour.terminate()
        neighbour.join()
    chosen = {c: n.literals[0] for c, n in result.choice.items() if c != ROOT}
    assert runner.check(read_json(path), chosen) == pytest.approx(result.cost)
    assert result.time_limit == 1.0
    assert result.status != "optimal" or result.lower_bound == pytest.approx(result.cost)
