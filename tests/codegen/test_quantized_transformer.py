"""Transformer layers quantised by onnxruntime.quantization compute ONNX Runtime's bits: a
product with a bias (quant_pre_process writes MatMul + Add as a Gemm) is an integer product
(rules qdq-matmul-bias and its per-channel form; QGemm's arithmetic), and dequantize ->
Softmax -> quantize is QLinearSoftmax's table algorithm (rule qdq-softmax), which ONNX
Runtime runs wherever the two types agree. With int8 activations (quantize_static's
default) the pairs ONNX Runtime moves to uint8 decide which groups fuse (ort_islands.py).
Each test compares with ONNX Runtime on this host and counts the integer ops the rules
formed, so that it fails where a rule stops matching even if the float chain happens to
round the same."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir.op.qnn import qnn_softmax_ref
from passmgr.passes.canonicalize_qnn import import_onnx

from .test_quantized import _quantize_static

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
quantization = pytest.importorskip("onnxruntime.quantization")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

SEQ, WIDTH = 12, 16


def _attention(path: Path) -> Path:
    """One attention head and an output projection, float: x (1, SEQ, WIDTH) -> y."""
    rng = np.random.default_rng(0)
    weights = {f"w{k}": (WIDTH, WIDTH) for k in "qkvo"} | {f"b{k}": (WIDTH,) for k in "qkvo"}
    inits = [
        nh.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)
        for name, shape in weights.items()
    ]
    inits.append(nh.from_array(np.array(0.25, "float32"), "temperature"))
    nodes = []
    for k in "qkv":
        nodes += [
            h.make_node("MatMul", ["x", f"w{k}"], [f"{k}0"]),
            h.make_node("Add", [f"{k}0", f"b{k}"], [k]),
        ]
    nodes += [
        h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        h.make_node("MatMul", ["q", "kt"], ["s0"]),
        h.make_node("Mul", ["s0", "temperature"], ["s"]),
        h.make_node("Softmax", ["s"], ["p"], axis=-1),
        h.make_node("MatMul", ["p", "v"], ["a"]),
        h.make_node("MatMul", ["a", "wo"], ["o0"]),
        h.make_node("Add", ["o0", "bo"], ["y"]),
    ]
    shape = [1, SEQ, WIDTH]
    graph = h.make_graph(
        nodes, "attention", [h.make_tensor_value_info("x", T.FLOAT, shape)],
        [h.make_tensor_value_info("y", T.FLOAT, shape)], inits,
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def _quantised(source: Path, activations: str, per_channel: bool) -> Path:
    """As users quantise: quant_pre_process (which writes MatMul + Add as Gemm), then
    quantize_static (QDQ, int8 weights)."""
    prepared = source.with_name("pre.onnx")
    quantization.shape_inference.quant_pre_process(
        str(source), str(prepared), skip_symbolic_shape=True
    )
    out, shape = source.with_name("q.onnx"), (1, SEQ, WIDTH)
    return _quantize_static(prepared, out, shape, "x", "QDQ", per_channel, activations)


def _formed(model: Any) -> str:
    """The imported model (as codegen.build imports it) after FakeQuantizationToInteger."""
    with pm.PassContext():
        mod = ir.infer_type(import_onnx(model))
        return str(pm.passes.FakeQuantizationToInteger()(mod)["main"])


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_a_quantised_attention_layer_equals_onnxruntime(
    tmp_path: Path, activations: str, per_channel: bool
) -> None:
    model = _quantised(_attention(tmp_path / "attention.onnx"), activations, per_channel)
    text = _formed(str(model))
    # the four projections with their biases, and the softmax, are integer ops
    products = re.findall(r"(%\d+) = qnn_matmul\(", text)
    assert sum(f"add({p}, meta" in text for p in products) == 4, text
    assert text.count("qnn_softmax(") == 1, text
    x = np.random.default_rng(5).standard_normal((1, SEQ, WIDTH)).astype("float32")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    want = ort.InferenceSession(str(model), options, ["CPUExecutionProvider"]).run(None, {"x": x})
    with pm.PassContext(opt_level=3):
        got = codegen.build(str(model)).run(x=x)
    np.testing.assert_array_equal(got, want[0])


def _qdq_softmax(dtype: str, shape: tuple[int, ...], axis: int, scales: tuple[float, float]) -> Any:
    """x (8-bit) -> DequantizeLinear -> Softmax -> QuantizeLinear -> y, one type."""
    zero = np.array(3 if dtype == "uint8" else -3, dtype)
    out_zero = np.array(0 if dtype == "uint8" else -128, dtype)
    kind = T.UINT8 if dtype == "uint8" else T.INT8
    inits = [
        nh.from_array(np.array(scales[0], "float32"), "xs"), nh.from_array(zero, "xz"),
        nh.from_array(np.array(scales[1], "float32"), "ys"), nh.from_array(out_zero, "yz"),
    ]  # fmt: skip
    nodes = [
        h.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]),
        h.make_node("Softmax", ["d"], ["p"], axis=axis),
        h.make_node("QuantizeLinear", ["p", "ys", "yz"], ["y"]),
    ]
    graph = h.make_graph(
        nodes, "qdq_softmax", [h.make_tensor_value_info("x", kind, list(shape))],
        [h.make_tensor_value_info("y", kind, list(shape))], inits,
    )  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@settings(deadline=None, max_examples=12)
@given(
    dtype=st.sampled_from(["uint8", "int8"]),
    shape=st.sampled_from([(2, 5, 33), (3, 64), (1, 2, 7, 197)]),
    axis=st.sampled_from([-1, 1]),
    scales=st.tuples(
        st.floats(0.0078125, 0.5, width=32), st.sampled_from([1 / 256, 1 / 255, 0.003])
    ),
    seed=st.integers(0, 2**16),
)
def test_qdq_softmax_is_onnxruntimes_qlinear_softmax(dtype, shape, axis, scales, seed) -> None:
    """Every output equal to ONNX Runtime (which fuses the group into QLinearSoftmax), for
    the compiled code and the op's reference alike."""
    model = _qdq_softmax(dtype, shape, axis, scales)
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    zero = np.array(3 if dtype == "uint8" else -3, dtype)
    out_zero = np.array(0 if dtype == "uint8" else -128, dtype)
    reference = qnn_softmax_ref(x, scales[0], zero, scales[1], out_zero, axis=axis)
    np.testing.assert_array_equal(reference, want)
    assert "qnn_softmax(" in _formed(model)
    with pm.PassContext(opt_level=3):
        got = codegen.build(model).run(x=x)
    np.testing.assert_array_equal(got, want)
