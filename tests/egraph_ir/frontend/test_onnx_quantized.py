"""Quantised files with int8 activations (ONNX Runtime's default S8S8 QDQ) computed as ONNX
Runtime computes them on x86: which groups stay float (ort_islands.py) and float
convolutions summed in MLAS's order (mlas_order.py), bit for bit against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import passmgr as pm
from egraph_ir.frontend.onnx import from_onnx
from egraph_ir.frontend.onnx.ort_islands import float_islands
from egraph_ir.op.mlas import column_pieces, stride_k

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper, numpy_helper = onnx.helper, onnx.numpy_helper

pytestmark = pytest.mark.onnx


def _residual_block(
    channels: int, size: int, kernel: int, stride: int, seed: int, groups: int = 1
) -> bytes:
    """x -> Q -> (conv -> Q -> DQ) + DQ(x's Q) -> Q -> DQ, int8 activations as
    quantize_static writes them by default (a strided conv: the two DQs are the outputs).
    x's Q feeds two DQs, so ONNX Runtime keeps it int8 and runs the convolution and the add
    in float. Weights stay within 7 bits: no host saturates their byte products (AVX2's
    vpmaddubsw pairs)."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-63, 64, (channels, channels // groups, kernel, kernel)).astype(np.int8)
    sx, sw, sy, sz = np.float32(0.02), np.float32(0.0031), np.float32(0.05), np.float32(0.06)
    inits = {
        "sx": np.array(sx), "zx": np.array(np.int8(-3)), "w": w, "sw": np.array(sw),
        "zw": np.array(np.int8(0)), "b": rng.integers(-900, 900, channels).astype(np.int32),
        "sb": np.array(np.float32(sx * sw)), "zb": np.array(np.int32(0)),
        "sy": np.array(sy), "zy": np.array(np.int8(5)), "sz": np.array(sz),
        "zz": np.array(np.int8(-7)),
    }  # fmt: skip
    pad = kernel // 2
    node = helper.make_node
    nodes = [
        node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
        node("DequantizeLinear", ["xq", "sx", "zx"], ["xr"]),
        node("DequantizeLinear", ["w", "sw", "zw"], ["wf"]),
        node("DequantizeLinear", ["b", "sb", "zb"], ["bf"]),
        node("Conv", ["xf", "wf", "bf"], ["c"], pads=[pad] * 4, strides=[stride] * 2, group=groups),
        node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
        node("DequantizeLinear", ["cq", "sy", "zy"], ["cf"]),
    ]
    outputs = ["cf", "xr"]
    if stride == 1:
        nodes += [
            node("Add", ["cf", "xr"], ["s"]),
            node("QuantizeLinear", ["s", "sz", "zz"], ["sq"]),
            node("DequantizeLinear", ["sq", "sz", "zz"], ["y"]),
        ]
        outputs = ["y"]
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


def test_the_groups_onnxruntime_leaves_in_float_are_found() -> None:
    model = onnx.load_from_string(_residual_block(16, 8, 3, 1, 0))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    plan = float_islands(model.graph.node, {"y"}, inits.get)
    # the Conv reads int8 (x's Q fans out), the Add mixes int8 and the conv's uint8 pair
    assert plan.inputs == {"c": {0}, "s": {0, 1}}
    assert plan.dequantized == {"xf", "cf", "xr"}


def test_uint8_activations_change_nothing() -> None:
    model = onnx.load_from_string(_residual_block(16, 8, 3, 1, 0))
    for t in model.graph.initializer:
        if t.name in ("zx", "zy", "zz"):
            value = numpy_helper.to_array(t).astype(np.int16) + 128
            t.CopyFrom(numpy_helper.from_array(value.astype(np.uint8), t.name))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert not float_islands(model.graph.node, {"y"}, inits.get).inputs


@pytest.mark.parametrize(
    "channels,size,kernel,stride,groups",
    [(64, 40, 3, 1, 1), (64, 6, 3, 2, 1), (48, 12, 1, 1, 1), (160, 4, 3, 1, 1), (96, 56, 5, 2, 96)],
    ids=["k576-segmented", "stride2", "pointwise-gemm", "filters-over-pixels", "depthwise5x5"],
)
def test_int8_activations_match_onnxruntime_bit_for_bit(
    channels: int, size: int, kernel: int, stride: int, groups: int
) -> None:
    model = _residual_block(channels, size, kernel, stride, seed=channels, groups=groups)
    x = np.random.default_rng(1).standard_normal((1, channels, size, size)).astype(np.float32)
    wants = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with pm.PassContext(opt_level=3):
        exe = codegen.build(from_onnx(model))
    gots = exe.run(x)
    for got, want in zip(gots if isinstance(gots, tuple | list) else [gots], wants, strict=True):
        assert int((got != want).sum()) == 0, np.abs(got - want).max()


def test_mlas_slices_follow_its_strides() -> None:
    assert stride_k(1568, 576) == 128  # wide products keep 128
    assert stride_k(49, 4608) == 256  # narrow ones trade columns for depth
    assert stride_k(20, 4608) == 512
    assert stride_k(3136, 27) == 32  # shallow ones halve it down to the depth
    # a 56x56 map split between two threads at a multiple of 16; one thread for tiny work
    assert column_pieces(64, 3136, 576, pointwise=False, threads=2) == [(0, 1568), (1568, 1568)]
    assert column_pieces(8, 16, 9, pointwise=False, threads=2) == [(0, 16)]
    assert column_pieces(512, 49, 4608, pointwise=False, threads=2) == [(0, 49)]  # rows split
