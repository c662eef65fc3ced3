"""Benchmark: built-in and real models compiled by codegen.build against ONNX Runtime (and
numpy eager for the built-in ones), all measured in this process, interleaved in rounds.

For every model it prints the compile time per stage, quiet medians with their spread
(max/median over the samples) for ours with the whole thread budget and with one thread,
ORT with 2 threads and 1; then the same while another process keeps a core busy (a loaded
machine); and the share of run time per kernel kind. Ratios are to ORT-2T measured in the
same phase. Machines are shared and noisy: compare ratios, not absolute times.

    .venv/bin/python benchmarks/models.py [--models cnn,resnet18] [--rounds 5] [--no-load]
        [--targets onnxruntime,blas]

With --targets, the model is also optimised, partitioned for those external targets
(pm.passes.partition_for) and built; it runs as the "offloaded" backend, and its regions
and partitioning time are printed.

Models: the built-in ones (mlp, cnn, transformer, elementwise) and, where
../shared/models/real exists, resnet18, mobilenet_v2, bert_tiny2 and lstm1 (those that
import today).
"""

from __future__ import annotations

import argparse
import multiprocessing
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
from egraph_ir.errors import FrontendError
from egraph_ir.frontend import from_onnx

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"
REAL = ("resnet18", "mobilenet_v2", "bert_tiny2", "lstm1")


def timed(fn: Callable[[], Any], count: int) -> list[float]:
    """`count` calls after one warm-up; per-call times in ms."""
    fn()
    out = []
    for _ in range(count):
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


def _spin(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(10_000):
            x += 1


class BusyProcess:
    """Another process keeping one core busy while the block runs."""

    def __enter__(self) -> BusyProcess:
        self.stop = multiprocessing.Event()
        self.proc = multiprocessing.Process(target=_spin, args=(self.stop,), daemon=True)
        self.proc.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.proc.join()


def load_model(name: str) -> tuple[ir.IRModule, dict[str, np.ndarray], Path | None] | None:
    if name in models.NAMES:
        path = SHARED / f"{name}.onnx"
        return models.get(name), models.example_inputs(name), path if path.exists() else None
    path = SHARED / "real" / f"{name}.onnx"
    if not path.exists():
        print(f"\n{name}: skipped ({path} is not present)")
        return None
    data = dict(np.load(path.with_suffix(".npz")))
    data.pop("expected")
    try:
        return from_onnx(path), data, path
    except FrontendError as exc:
        print(f"\n{name}: skipped (does not import: {str(exc).splitlines()[0][:100]})")
        return None


def measure(
    backends: dict[str, Callable[[], Any]], rounds: int, count: int
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {k: [] for k in backends}
    for _ in range(rounds):
        for label, fn in backends.items():
            samples[label] += timed(fn, count)
            time.sleep(0.3)  # OpenBLAS (numpy eager) and ORT threads spin for a while after a run
    return samples


def report(title: str, samples: dict[str, list[float]]) -> None:
    medians = {k: statistics.median(v) for k, v in samples.items()}
    base = medians.get("ORT 2T")
    print(f"  {title}")
    for label, m in medians.items():
        ratio = f"{m / base:6.2f}x ORT-2T" if base else " " * 13
        spread = max(samples[label]) / m
        print(f"    {label:<12} {m:9.3f} ms  {ratio}  max/median {spread:5.2f}")


def offloaded(mod: ir.IRModule, targets: list[str]) -> tuple[codegen.Executable, float]:
    """Optimised, partitioned for `targets` and built; also the partitioning seconds."""
    from codegen.build import optimise

    with pm.PassContext(opt_level=3):
        optimised = optimise(mod, None)
        t0 = time.perf_counter()
        parted = pm.passes.partition_for(targets)(optimised)
        seconds = time.perf_counter() - t0
        return codegen.build(parted), seconds


def bench(name: str, rounds: int, count: int, loaded: bool, targets: list[str]) -> None:
    loaded_model = load_model(name)
    if loaded_model is None:
        return
    mod, inputs, path = loaded_model
    t0 = time.perf_counter()
    with pm.PassContext(opt_level=3):
        exe = codegen.build(mod)
    compile_s = time.perf_counter() - t0
    with pm.PassContext(opt_level=3, config={"codegen.num_threads": 1}):
        exe1 = codegen.build(mod)
    backends: dict[str, Callable[[], Any]] = {
        f"ours {exe.threads}T": lambda: exe.run(**inputs),
        "ours 1T": lambda: exe1.run(**inputs),
    }
    if targets:
        off, part_s = offloaded(mod, targets)
        backends["offloaded"] = lambda: off.run(**inputs)
        regions = ", ".join(f"{r['target']}({len(r['ops'])} ops)" for r in off.regions())
        print(f"\n{name}: partitioned in {1e3 * part_s:.0f} ms into {regions}")
    if name in models.NAMES:
        backends["numpy eager"] = lambda: ir.interpret(mod, **inputs)
    if path is not None:
        for threads in (2, 1):
            session = ort_session(path, threads)
            backends[f"ORT {threads}T"] = lambda s=session: s.run(None, inputs)
    print(f"\n{name}: kernels {exe.kernel_kinds()} ({exe.kernels_reused} reuse compiled code)")
    print(f"  memory: {exe.memory_plan.summary()}")
    stages = ", ".join(f"{k} {1e3 * v:.0f}" for k, v in exe.compile_seconds.items())
    print(f"  compile {1e3 * compile_s:.0f} ms (stages, ms: {stages})")
    report("quiet", measure(backends, rounds, count))
    if loaded:
        with BusyProcess():
            report("loaded (one core busy in another process)", measure(backends, rounds, count))
    shares: dict[str, float] = {}
    for row in exe.profile(inputs, repeats=count):
        shares[row.kind] = shares.get(row.kind, 0.0) + row.seconds
    total = sum(shares.values()) or 1.0
    print("  time per kernel kind: " + ", ".join(f"{k} {v / total:.0%}" for k, v in shares.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join((*models.NAMES, *REAL)))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--count", type=int, default=20, help="runs per backend per round")
    parser.add_argument("--no-load", action="store_true", help="skip the loaded measurement")
    parser.add_argument("--targets", default="", help="also run offloaded to these targets")
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    for name in args.models.split(","):
        bench(name, args.rounds, args.count, not args.no_load, targets)


if __name__ == "__main__":
    main()
