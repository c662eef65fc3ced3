"""Benchmark: the four built-in models compiled by codegen.build, against numpy eager and
ONNX Runtime (1 and 2 threads), all measured in this process, interleaved in rounds.

numpy eager is the reference interpreter on the unoptimised model (one numpy call per op).
ONNX Runtime runs the reference files in ../shared/models when they exist (the same weights;
skipped otherwise). Prints medians, ratios to ORT with 2 threads, and compile time per stage.
Machines are shared and noisy: compare ratios, not absolute times.

    .venv/bin/python benchmarks/models.py [--models elementwise,mlp] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import models

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"


def timed(fn: Callable[[], Any], seconds: float) -> list[float]:
    """Run fn repeatedly for about `seconds`; per-call times in ms."""
    out: list[float] = []
    fn()  # warm
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(out) < 3:
        t0 = time.perf_counter()
        fn()
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def ort_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def bench(name: str, rounds: int, seconds: float) -> None:
    mod = models.get(name)
    inputs = models.example_inputs(name)
    t0 = time.perf_counter()
    with pm.PassContext(opt_level=3):
        exe = codegen.build(mod)
    compile_s = time.perf_counter() - t0
    with pm.PassContext(opt_level=3, config={"codegen.num_threads": 1}):
        exe1 = codegen.build(mod)
    expected = ir.interpret(mod, **inputs)
    err = float(np.max(np.abs(exe.run(**inputs) - expected)))
    backends: dict[str, Callable[[], Any]] = {
        "ours 2T": lambda: exe.run(**inputs),
        "ours 1T": lambda: exe1.run(**inputs),
        "numpy eager": lambda: ir.interpret(mod, **inputs),
    }
    path = SHARED / f"{name}.onnx"
    if path.exists():
        for threads in (1, 2):
            session = ort_session(path, threads)
            backends[f"ORT {threads}T"] = lambda s=session: s.run(None, inputs)
    samples: dict[str, list[float]] = {k: [] for k in backends}
    for _ in range(rounds):
        for label, fn in backends.items():
            samples[label] += timed(fn, seconds)
            time.sleep(0.1)  # let spinning worker threads settle
    medians = {k: statistics.median(v) for k, v in samples.items()}
    base = medians.get("ORT 2T")
    print(f"\n{name}: max |compiled - interpreter| {err:.2e}; kernels {exe.kernel_kinds()}")
    print(f"  memory: {exe.memory_plan.summary()}")
    stages = ", ".join(f"{k} {1e3 * v:.0f} ms" for k, v in exe.compile_seconds.items())
    print(f"  compile {1e3 * compile_s:.0f} ms ({stages})")
    for label, m in medians.items():
        ratio = f"{m / base:6.2f}x ORT-2T" if base else ""
        print(f"  {label:<12} {m:9.3f} ms  {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(models.NAMES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.3, help="per backend per round")
    args = parser.parse_args()
    for name in args.models.split(","):
        bench(name, args.rounds, args.seconds)


if __name__ == "__main__":
    main()
