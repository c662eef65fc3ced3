"""Benchmark: 3x3 convolutions of stride 1 by the direct (or channel-vector) kernel on NCHW data and
by Winograd's F(2x2, 3x3) and F(4x4, 3x3) on NCHW16c data (codegen/lower/kernels/conv/winograd.py),
on ResNet-18's four layer shapes, with ONNX Runtime's Conv on the same shape for scale. Interleaved
rounds in one process (a noisy spell hits every kernel), medians of each round's median; the largest
difference from the direct convolution's result beside each Winograd form. These are the rates
egraph_ir/egraph/kernel_cost.py's defaults quote.

    .venv/bin/python benchmarks/winograd.py [--rounds 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engines import interleaved_ms

LAYERS = ((64, 56), (128, 28), (256, 14), (512, 7))  # channels, map side


def _build(fn: ir.Function, threads: int) -> Any:
    with pm.PassContext(opt_level=2, config={"codegen.num_threads": threads}):
        return codegen.build(fn)


def forms(c: int, side: int, threads: int) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:
    """The runs of each form of one layer, and each Winograd form's largest difference
    from the direct convolution's result."""
    rng = np.random.default_rng(c)
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype("float32")
    value = rng.standard_normal((1, c, side, side)).astype("float32")
    blocked = np.ascontiguousarray(
        value.reshape(1, c // 16, 16, side, side).transpose(0, 1, 3, 4, 2)
    )
    x = ir.var("x", shape=value.shape)
    direct = _build(ir.Function([x], op.conv2d(x, ir.const(w), padding=(1, 1))), threads)
    want = direct.run(x=value)
    runs: dict[str, Callable[[], Any]] = {"direct": lambda: direct.run(x=value)}
    errors = {}
    xb = ir.var("x", shape=blocked.shape)
    for tile in (2, 4):
        fn = ir.Function([xb], op.conv2d_winograd(xb, ir.const(w), tile_size=tile))
        exe = _build(fn, threads)
        got = exe.run(x=blocked).transpose(0, 1, 4, 2, 3).reshape(want.shape)
        errors[f"{tile}x{tile}"] = float(np.abs(got - want).max())
        runs[f"{tile}x{tile}"] = lambda exe=exe: exe.run(x=blocked)
    runs["ORT"] = _onnxruntime(w, value, threads)
    return runs, errors


def _onnxruntime(w: np.ndarray, value: np.ndarray, threads: int) -> Callable[[], Any]:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    shape = list(value.shape)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return lambda: session.run(None, {"x": value})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(
        "| layer | direct us | 2x2 us (GFLOP/s) | 4x4 us (GFLOP/s) | ORT us | max diff 2x2 / 4x4 |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for c, side in LAYERS:
        runs, errors = forms(c, side, args.threads)
        ms = interleaved_ms(runs, args.rounds)
        flops = 2.0 * c * c * 9 * side * side
        rate = {k: f"{1e3 * ms[k]:.0f} ({flops / ms[k] / 1e6:.0f})" for k in ("2x2", "4x4")}
        print(
            f"| {c} ch {side}x{side} | {1e3 * ms['direct']:.0f} | {rate['2x2']} | {rate['4x4']} "
            f"| {1e3 * ms['ORT']:.0f} | {errors['2x2']:.1e} / {errors['4x4']:.1e} |"
        )


if __name__ == "__main__":
    main()
