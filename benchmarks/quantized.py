"""Benchmark: quantised real models, this compiler against ONNX Runtime and OpenVINO on the
same file, in one process, 2 threads each, interleaved rounds.

    .venv/bin/python benchmarks/quantized.py [--models resnet18,bert_tiny2] [--rounds 5]
        [--per-channel] [--activations int8|uint8] [--reduce-range] [--format qdq|qoperator]

The CNNs, ViT and LSTM of ../shared/models/real are quantised as users do it, with
onnxruntime.quantization.quantize_static (QDQ format, int8 weights, activations int8 as
its defaults or uint8, per-tensor scales or per output channel with --per-channel, 7-bit
weights with --reduce-range, QLinearConv and friends in the file with --format qoperator;
four random calibration batches); the BERT encoder with
quantize_dynamic (int8 weights, DynamicQuantizeLinear + MatMulInteger), or statically with
--dynamic ''. The table gives
latency medians, ours / the faster engine, ours / our own float build of the original
model, how many outputs differ from ONNX Runtime's int8 run and by how much (the goal for
the CNNs' 8-bit outputs: none; BERT's are floats computed in another order), and the
compile times of the quantised and of the float build. OpenVINO (f32 precision hint)
is a benchmark-only dependency; its column is left out when it is not installed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import codegen
import passmgr as pm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engines import REAL, interleaved_ms, onnxruntime, openvino

STATIC = ("resnet18", "mobilenet_v2", "efficientnet_b0", "vit_tiny4", "lstm1")
DYNAMIC = ("bert_tiny2",)


def dynamic(name: str, args: argparse.Namespace) -> bool:
    """Whether the model is quantised with quantize_dynamic (--dynamic)."""
    return name in args.dynamic.split(",")


def quantise(name: str, feeds: dict[str, np.ndarray], out: Path, args: argparse.Namespace) -> Path:
    """The model quantised as onnxruntime.quantization writes it (see the docstring)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source, target = REAL / f"{name}.onnx", out / f"{name}_int8.onnx"
    if dynamic(name, args):
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        return target

    class RandomBatches(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            batches = [
                {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
                for _ in range(4)
            ]
            self.items = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    prepared = out / f"{name}_pre.onnx"
    quant_pre_process(source, prepared, skip_symbolic_shape=True)
    activations = QuantType.QInt8 if args.activations == "int8" else QuantType.QUInt8
    quantize_static(
        prepared, target, RandomBatches(),
        quant_format=QuantFormat.QOperator if args.format == "qoperator" else QuantFormat.QDQ,
        activation_type=activations, weight_type=QuantType.QInt8, per_channel=args.per_channel,
        reduce_range=args.reduce_range,
    )  # fmt: skip
    return target


def build(path: Path, threads: int) -> tuple[Any, float]:
    start = time.perf_counter()
    with pm.PassContext(opt_level=3, config={"codegen.num_threads": threads}):
        exe = codegen.build(path)
    return exe, time.perf_counter() - start


def first_output(out: Any) -> np.ndarray:
    return out[0] if isinstance(out, tuple | list) else out


def bench(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    rounds, threads = args.rounds, args.threads
    feeds = dict(np.load(REAL / f"{name}.npz"))
    feeds.pop("expected")
    path = quantise(name, feeds, work, args)
    exe, compile_s = build(path, threads)
    float_exe, float_compile_s = build(REAL / f"{name}.onnx", threads)
    ort_run = onnxruntime(path, feeds, threads)
    want, got = first_output(ort_run()), first_output(exe.run(**feeds))
    engines: dict[str, Callable[[], Any]] = {"ours": lambda: exe.run(**feeds), "ORT": ort_run}
    ov_run = openvino(path, feeds, threads)
    if ov_run is not None:
        engines["OpenVINO"] = ov_run
    engines["ours float"] = lambda: float_exe.run(**feeds)
    ms = interleaved_ms(engines, rounds)
    best = min(v for k, v in ms.items() if k not in ("ours", "ours float"))
    form = "QOperator" if args.format == "qoperator" else "QDQ"
    form += f" {'S8S8' if args.activations == 'int8' else 'U8S8'}"
    form += " per channel" if args.per_channel else ""
    form += " 7-bit weights" if args.reduce_range else ""
    return {
        "model": f"{name} ({'dynamic' if dynamic(name, args) else form})", "ms": ms,
        "ratio": ms["ours"] / best, "vs_float": ms["ours"] / ms["ours float"],
        "differ": int((got != want).sum()), "outputs": want.size,
        "max_diff": float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()),
        "compile": (compile_s, float_compile_s),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(STATIC + DYNAMIC))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--per-channel", action="store_true", help="weight scales per channel")
    parser.add_argument("--activations", choices=("int8", "uint8"), default="int8")
    parser.add_argument("--reduce-range", action="store_true", help="7-bit weights")
    parser.add_argument("--format", choices=("qdq", "qoperator"), default="qdq")
    parser.add_argument(
        "--dynamic", default=",".join(DYNAMIC),
        help="models quantised with quantize_dynamic ('' quantises BERT statically too)",
    )  # fmt: skip
    args = parser.parse_args()
    if not REAL.is_dir():
        print(f"no real models at {REAL}: nothing to measure")
        return
    # a first build pays for the compile helpers' start and lazy imports: made here, on
    # the smallest model, so the int8 and float compile times compare like with like
    build(REAL / "lstm1.onnx", args.threads)
    with tempfile.TemporaryDirectory() as work:
        rows = [bench(n, args, Path(work)) for n in args.models.split(",")]
    engines = list(rows[0]["ms"])
    header = " | ".join(f"{e} ms" for e in engines)
    columns = (
        "ours / best | ours / our float | vs ORT int8: differing (max diff) | compile int8 / float"
    )
    print(f"| model | {header} | {columns} |")
    print("|---|" + "---:|" * (len(engines) + 4))
    for r in rows:
        cells = " | ".join(f"{r['ms'][e]:.3f}" for e in engines)
        int8_s, float_s = r["compile"]
        print(
            f"| {r['model']} | {cells} | {r['ratio']:.2f} | {r['vs_float']:.2f} | "
            f"{r['differ']} of {r['outputs']} ({r['max_diff']:.2g}) | "
            f"{int8_s:.1f} s / {float_s:.1f} s |"
        )


if __name__ == "__main__":
    main()
