"""Benchmark: this compiler against ONNX Runtime and OpenVINO on the real models, in one
process, 2 threads each, interleaved rounds; prints latency medians, ours / best, and
compile times, and our achieved GFLOP/s against the machine's measured peak (a roofline
column: BLAS SGEMM at 2048^3 on the same threads).

    .venv/bin/python benchmarks/engines.py [--models resnet18,vit_tiny4] [--rounds 5]
        [--threads 2] [--batch 1,8]

The models are the ONNX files of ../shared/models/real (with their .npz inputs), at each
batch size of `--batch`: batch 1 is the file itself; a larger batch is the file with its
inputs' first dimension set to it and its inputs repeated (each engine compiles that fixed
shape, as a server with a fixed batch would); an export whose shape arithmetic fixes
batch 1 (ViT's and BERT's constants) is skipped at that batch, and BERT is measured at
batch 8 x seq 128 with the symbolic BERT of ../shared/models/dynamic, fixed to that shape
(row bert_dyn_128_2). OpenVINO
runs with INFERENCE_PRECISION_HINT=f32 (its default on AVX-512 CPUs is bf16, a different
computation); it is a benchmark-only dependency (`pip install -e ".[bench]"`) and its
column is left out when it is not installed. Machines are noisy: compare the ratios of one
run, and say how loaded the machine was.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import codegen
import passmgr as pm
from egraph_ir.frontend import from_onnx

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models"
REAL = SHARED / "real"
DYNAMIC_BERT = SHARED / "dynamic" / "bert_dyn_128_2.onnx"
MODELS = ("resnet18", "mobilenet_v2", "efficientnet_b0", "vit_tiny4", "bert_tiny2", "lstm1")


def median_seconds(run: Callable[[], Any], budget_s: float = 0.4, least: int = 5) -> float:
    """The median of as many runs as fit in the budget (at least `least`)."""
    samples = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(samples) < least:
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def ours(
    path: Path, feeds: dict[str, np.ndarray], threads: int
) -> tuple[Callable[[], Any], float, float]:
    """Our run, the compile's seconds, and the FLOPs of one run (the kernels' estimates)."""
    start = time.perf_counter()
    with pm.PassContext(opt_level=3, config={"codegen.num_threads": threads}):
        exe = codegen.build(from_onnx(path))
    flops = sum(getattr(n, "flops", 0.0) for n in exe.graph.nodes)
    return (lambda: exe.run(**feeds)), time.perf_counter() - start, flops


PEAK_PROBE = """
import time, numpy as np
a = np.random.default_rng(0).standard_normal((2048, 2048)).astype("float32")
best = 1e9
for _ in range(5):
    start = time.perf_counter(); a @ a; best = min(best, time.perf_counter() - start)
print(2 * 2048**3 / best / 1e9)
"""


def peak_gflops(threads: int) -> float:
    """The machine's measured float32 peak for the roofline column: numpy's BLAS SGEMM at
    2048^3, best of five, in a process of its own with OPENBLAS_NUM_THREADS=threads."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads)}
    out = subprocess.run(
        [sys.executable, "-c", PEAK_PROBE], env=env, capture_output=True, text=True
    )
    return float(out.stdout.strip())


def onnxruntime(path: Path, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


def openvino(path: Path, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], Any] | None:
    try:
        import openvino as ov
    except ImportError:
        return None
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    request = compiled.create_infer_request()
    return lambda: request.infer(feeds)


def interleaved_ms(engines: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Each engine's median milliseconds: three warm-up runs each, then `rounds` rounds
    that time every engine in turn (a noisy spell then hits all of them)."""
    for run in engines.values():
        for _ in range(3):
            run()
    samples: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(rounds):
        for k, run in engines.items():
            samples[k].append(median_seconds(run))
    return {k: 1e3 * statistics.median(v) for k, v in samples.items()}


def fixed_batch(path: Path, batch: int, folder: Path) -> Path | None:
    """The model with every input's and output's first dimension set to `batch`, written
    into `folder`; None where ONNX Runtime refuses it (an export whose shape arithmetic
    holds batch 1 as constants)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(path)
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_value = batch
    del model.graph.value_info[:]
    out = folder / f"{path.stem}_batch{batch}.onnx"
    onnx.save(model, out)
    try:
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    except Exception:  # ORT's shape inference finds the fixed batch
        return None
    return out


def fixed_bert(batch: int, seq: int, folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """The symbolic BERT of ../shared/models/dynamic fixed to batch x seq, and its inputs
    (random token ids, a full attention mask)."""
    import onnx

    model = onnx.load(DYNAMIC_BERT)
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        dims[0].dim_value, dims[1].dim_value = batch, seq
    out = folder / f"bert_dyn_{batch}x{seq}.onnx"
    onnx.save(model, out)
    ids = np.random.default_rng(0).integers(0, 30522, (batch, seq), dtype=np.int64)
    return out, {"input_ids": ids, "attention_mask": np.ones((batch, seq), np.int64)}


def bench(
    name: str, path: Path, feeds: dict[str, np.ndarray], batch: int, rounds: int, threads: int
) -> dict[str, Any]:
    run_ours, compile_s, flops = ours(path, feeds, threads)
    engines: dict[str, Callable[[], Any]] = {
        "ours": run_ours,
        "ORT": onnxruntime(path, feeds, threads),
    }
    ov_run = openvino(path, feeds, threads)
    if ov_run is not None:
        engines["OpenVINO"] = ov_run
    ms = interleaved_ms(engines, rounds)
    best = min(v for k, v in ms.items() if k != "ours")
    gflops = flops / (ms["ours"] / 1e3) / 1e9
    return {"model": name, "batch": batch, "ms": ms, "ratio": ms["ours"] / best,
            "compile_s": compile_s, "gflops": gflops}  # fmt: skip


def cases(
    models: list[str], batches: list[int], folder: Path
) -> list[tuple[str, Path, dict[str, np.ndarray], int]]:
    """(name, file, inputs, batch) for every model at every batch it can take, BERT at
    batch 8 x seq 128 where batch 8 is asked for."""
    found = []
    for batch in batches:
        for name in models:
            path = REAL / f"{name}.onnx"
            feeds = dict(np.load(path.with_suffix(".npz")))
            feeds.pop("expected")
            if batch != 1:
                path = fixed_batch(path, batch, folder)
                if path is None:
                    print(f"{name}: the export fixes batch 1; not measured at batch {batch}")
                    continue
                feeds = {k: np.concatenate([v] * batch) for k, v in feeds.items()}
            found.append((name, path, feeds, batch))
        if batch == 8 and "bert_tiny2" in models and DYNAMIC_BERT.is_file():
            found.append(("bert_dyn_128_2 (seq 128)", *fixed_bert(8, 128, folder), 8))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", default="1,8", help="batch sizes, e.g. 1,8")
    args = parser.parse_args()
    if not REAL.is_dir():
        print(f"no real models at {REAL}: nothing to measure")
        return
    batches = [int(b) for b in args.batch.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        found = cases(args.models.split(","), batches, Path(folder))
        rows = [bench(*case, args.rounds, args.threads) for case in found]
    peak = peak_gflops(args.threads)
    engines = list(rows[0]["ms"])
    header = " | ".join(f"{e} ms" for e in engines)
    print(f"| model | batch | {header} | ours / best | ours GFLOP/s (of peak) | compile |")
    print("|---|---:|" + "---:|" * (len(engines) + 3))
    for r in rows:
        cells = " | ".join(f"{r['ms'][e]:.3f}" for e in engines)
        roof = f"{r['gflops']:.0f} ({100 * r['gflops'] / peak:.0f}%)"
        print(
            f"| {r['model']} | {r['batch']} | {cells} | {r['ratio']:.2f} | {roof} "
            f"| {r['compile_s']:.1f} s |"
        )
    print(f"peak: {peak:.0f} GFLOP/s (SGEMM 2048^3, {args.threads} threads)")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
