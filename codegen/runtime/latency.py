"""`Executable.benchmark`: end-to-end latency as `onnxruntime_perf_test` or `trtexec`
report it — warm-up runs, then timed runs (a count, or as many as fit in a duration), and
their mean, percentiles, spread and throughput, with the thread budget they used."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Latency:
    """Seconds per run over `runs` timed runs (after `warmup` untimed ones)."""

    runs: int
    warmup: int
    threads: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    std: float

    @property
    def throughput(self) -> float:
        """Runs per second, one after another."""
        return 1.0 / self.mean if self.mean > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "throughput_per_s": self.throughput, "unit": "s"}

    def __str__(self) -> str:
        ms = {k: 1e3 * getattr(self, k) for k in ("mean", "p50", "p90", "p99", "min", "max")}
        return (
            f"latency over {self.runs} runs ({self.threads} thread(s), {self.warmup} warm-up): "
            f"mean {ms['mean']:.3f} ms, p50 {ms['p50']:.3f}, p90 {ms['p90']:.3f}, "
            f"p99 {ms['p99']:.3f}, min {ms['min']:.3f}, max {ms['max']:.3f} ms; "
            f"throughput {self.throughput:.1f} runs/s"
        )


def measure(
    run: Callable[[], Any],
    threads: int,
    repeats: int = 100,
    warmup: int = 5,
    duration: float | None = None,
) -> Latency:
    """Time `run`: `warmup` untimed runs, then `repeats` timed ones, or with `duration`
    (seconds) as many as fit in it (at least one)."""
    if repeats < 1 or warmup < 0 or (duration is not None and duration <= 0):
        raise ValueError("repeats >= 1, warmup >= 0 and a positive duration")
    for _ in range(warmup):
        run()
    samples: list[float] = []
    end = time.perf_counter() + duration if duration is not None else None
    while (len(samples) < repeats) if end is None else (not samples or time.perf_counter() < end):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    s = np.asarray(samples)
    p50, p90, p99 = np.percentile(s, [50, 90, 99])
    return Latency(
        len(s), warmup, threads, float(s.mean()), float(p50), float(p90), float(p99),
        float(s.min()), float(s.max()), float(s.std()),
    )  # fmt: skip
