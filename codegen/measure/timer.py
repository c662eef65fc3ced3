"""The one timer behind every measurement the back end keeps: kernel choices (`egc tune`),
the kernel rates of the layout cost model and the placement cost model.

The statistic: seconds per run, the median over rounds of each round's median. A round
takes every candidate in turn, each run `per_round` times (or, with `budget_s`, as often
as fits in that many seconds, at least MIN_RUNS times), so a busy moment of a shared
machine slows every candidate alike; timed one after the other, it decided which was
faster (a MobileNetV2 layer measured channels-faster in one tune and direct-faster in the
next). The median of medians drops both the odd slow run and the odd slow round.

What users time themselves (`egc run --repeats`, `Executable.benchmark`) reports the
whole distribution instead (codegen/runtime/latency.py), and a profile the median per
kernel over its repeats (Executable.profile).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

MIN_RUNS = 5  # runs of a candidate per round at least, when a round has a time budget
MAX_RUNS = 1000  # and at most


def _round_median(run: Callable[[], Any], per_round: int, budget_s: float | None) -> float:
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s if budget_s is not None else 0.0
    while True:
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
        if budget_s is None:
            if len(samples) >= per_round:
                break
        elif len(samples) >= MAX_RUNS or (
            len(samples) >= MIN_RUNS and time.perf_counter() >= deadline
        ):
            break
    return statistics.median(samples)


def interleaved_medians[K: Hashable](
    runs: Mapping[K, Callable[[], Any]],
    rounds: int = 11,
    per_round: int = 10,
    budget_s: float | None = None,
) -> dict[K, float]:
    """Seconds per run of each callable: the median over `rounds` interleaved rounds of
    each round's median (the module doc says why). Every callable runs once first, to page
    in its arena and code."""
    for run in runs.values():
        run()
    medians: dict[K, list[float]] = {name: [] for name in runs}
    for _ in range(max(1, rounds)):
        for name, run in runs.items():
            medians[name].append(_round_median(run, per_round, budget_s))
    return {name: statistics.median(m) for name, m in medians.items()}


def seconds_per_run(run: Callable[[], Any], rounds: int = 1, budget_s: float = 0.1) -> float:
    """One callable timed alone: interleaved_medians of a single candidate."""
    return interleaved_medians({0: run}, rounds=rounds, budget_s=budget_s)[0]
