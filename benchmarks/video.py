"""Benchmark: a video network's stem and first residual block (3-D convolutions, as
torchvision's r3d_18 exports them) compiled from ONNX, against ONNX Runtime in the same
process, in interleaved rounds. Not a test: read the ratio.

    .venv/bin/python benchmarks/video.py [--frames 16] [--side 112] [--rounds 5]

The model is built in code (random weights): Conv3d 3x7x7 stride (1, 2, 2) + BatchNorm +
ReLU, Conv3d 3x3x3 + BatchNorm + residual add + ReLU, MaxPool3d, GlobalAveragePool, Gemm.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import codegen
from egraph_ir.frontend import from_onnx


def video_block(frames: int, side: int, seed: int = 0):  # -> onnx.ModelProto
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def normal(name: str, *shape: int, scale: float = 0.1):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"), name)

    def positive(name: str, n: int):
        return numpy_helper.from_array((rng.random(n) + 0.5).astype("float32"), name)

    def norm(k: int) -> list:
        scale, bias, mean, var = f"g{k}", f"b{k}", f"m{k}", f"v{k}"
        return [positive(scale, 64), normal(bias, 64), normal(mean, 64), positive(var, 64)]

    inits = [
        normal("w1", 64, 3, 3, 7, 7),
        *norm(1),
        normal("w2", 64, 64, 3, 3, 3, scale=0.05),
        *norm(2),
        normal("fw", 10, 64),
        normal("fb", 10),
    ]
    bn = "BatchNormalization"
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 7, 7], strides=[1, 2, 2],
                         pads=[1, 3, 3, 1, 3, 3]),
        helper.make_node(bn, ["c1", "g1", "b1", "m1", "v1"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3, 3], pads=[1] * 6),
        helper.make_node(bn, ["c2", "g2", "b2", "m2", "v2"], ["n2"]),
        helper.make_node("Add", ["n2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[3, 3, 3], strides=[2, 2, 2],
                         pads=[1] * 6),
        helper.make_node("GlobalAveragePool", ["p2"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "video",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, frames, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def median_ms(run: Callable[[], object], count: int) -> float:
    run()
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def main() -> None:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--side", type=int, default=112)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=10, help="runs per round")
    args = parser.parse_args()
    model = video_block(args.frames, args.side)
    x = np.random.default_rng(1).standard_normal((1, 3, args.frames, args.side, args.side))
    x = x.astype("float32")
    t0 = time.perf_counter()
    exe = codegen.build(from_onnx(model))
    print(f"compile {time.perf_counter() - t0:.2f} s; kernels {exe.kernel_kinds()}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = exe.threads
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    expected = session.run(None, {"x": x})[0]
    print(f"max |ours - ORT| {np.abs(exe.run(x=x) - expected).max():.2e}")
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours.append(median_ms(lambda: exe.run(x=x), args.count))
        theirs.append(median_ms(lambda: session.run(None, {"x": x}), args.count))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"ours {a:.1f} ms   ORT {b:.1f} ms   ratio {a / b:.2f}x  ({exe.threads} threads each)")


if __name__ == "__main__":
    main()
