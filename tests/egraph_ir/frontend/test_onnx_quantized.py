"""Quantised files with int8 activations (ONNX Runtime's default S8S8 QDQ) computed as ONNX
Runtime computes them on x86: which groups stay float (ort_islands.py) and float
convolutions summed in MLAS's order (egraph_ir/op/mlas.py), bit for bit against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import passmgr as pm
from egraph_ir.errors import FrontendError
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


def _conv_chain(channels: int, size: int) -> bytes:
    """x -> Q -> DQ -> conv -> Q -> DQ -> conv -> Q -> DQ, int8 activations and weights of
    the full int8 range: every Q feeds one DQ, so ONNX Runtime rewrites each pair to uint8
    and fuses both convolutions (uint8 x int8, pairs saturated without VNNI)."""
    rng = np.random.default_rng(channels)
    inits = {"sb": np.array(np.float32(0.02 * 0.01)), "bz": np.array(np.int32(0))}
    for name, zero in (("x", -100), ("y", -90), ("z", 3)):
        inits[f"s{name}"], inits[f"z{name}"] = np.array(np.float32(0.02)), np.array(np.int8(zero))
    node, nodes = helper.make_node, [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"])]
    for i, (a, b) in enumerate((("x", "y"), ("y", "z"))):
        inits[f"w{i}"] = rng.integers(-128, 128, (channels, channels, 3, 3)).astype(np.int8)
        inits[f"ws{i}"], inits[f"wz{i}"] = np.array(np.float32(0.01)), np.array(np.int8(0))
        inits[f"b{i}"] = rng.integers(-900, 900, channels).astype(np.int32)
        nodes += [
            node("DequantizeLinear", [f"{a}q", f"s{a}", f"z{a}"], [f"{a}f"]),
            node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"w{i}f"]),
            node("DequantizeLinear", [f"b{i}", "sb", "bz"], [f"b{i}f"]),
            node("Conv", [f"{a}f", f"w{i}f", f"b{i}f"], [b], pads=[1] * 4),
            node("QuantizeLinear", [b, f"s{b}", f"z{b}"], [f"{b}q"]),
        ]
    nodes.append(node("DequantizeLinear", ["zq", "sz", "zz"], ["out"]))
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()


def test_pairs_onnxruntime_moves_to_uint8_are_moved() -> None:
    model = onnx.load_from_string(_conv_chain(8, 6))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    plan = float_islands(model.graph.node, {"out"}, inits.get)
    assert plan.shifted == {"xq", "xf", "yq", "yf", "zq", "out"} and not plan.inputs
    assert plan.uint8_zeros["zx"] == 28 and plan.uint8_zeros["zy"] == 38


@pytest.mark.parametrize("channels", [8, 3])
def test_int8_activations_onnxruntime_fuses_as_uint8_match_it(channels: int) -> None:
    """Large activations and full-range weights: on a CPU without VNNI ONNX Runtime's
    uint8 pairs saturate (summed exactly: 220 of 1,152 and 123 of 432 outputs differ)."""
    model = _conv_chain(channels, 12)
    x = np.random.default_rng(2).uniform(0.0, 4.5, (1, channels, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with pm.PassContext(opt_level=3):
        got = codegen.build(from_onnx(model)).run(x)
    assert int((got != want).sum()) == 0, np.abs(got - want).max()


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


def _qoperator_model(
    op_type: str, inputs: dict, consts: dict, attrs: dict, order: list, out_dtype: str
) -> bytes:
    """One com.microsoft node; `order` names its inputs (graph inputs or constants)."""
    values = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in inputs.items()
    ]
    node = helper.make_node(op_type, order, ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], op_type, values, [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)), None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _scales(dtype: str, rng: np.random.Generator, *names: str) -> dict:
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    out = {}
    for name in names:
        out[f"{name}s"] = np.array(rng.uniform(0.005, 0.08), np.float32)
        out[f"{name}z"] = np.array(rng.integers(low // 2 + 32, high // 2 + 32)).astype(dtype)
    return out


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize(
    "op_type", ["QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
                "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat"],
)  # fmt: skip
def test_qoperator_ops_match_onnxruntime(op_type: str, dtype: str) -> None:
    """Each QOperator op against ONNX Runtime's kernel: bit for bit where the quantize
    rules form its integer op; the float chain elsewhere (at most one quantum)."""
    rng = np.random.default_rng(7)
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    a = rng.integers(low, high, (1, 16, 7, 7)).astype(dtype)
    b = rng.integers(low, high, (1, 16, 7, 7)).astype(dtype)
    c = _scales(dtype, rng, "a", "b", "y")
    attrs: dict = {}
    if op_type in ("QLinearAdd", "QLinearMul"):
        inputs, order = {"a": a, "b": b}, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    elif op_type == "QLinearConcat":
        inputs, order, attrs = (
            {"a": a, "b": b},
            ["ys", "yz", "a", "as", "az", "b", "bs", "bz"],
            {"axis": 1},
        )
    else:
        inputs, order = {"a": a}, ["a", "as", "az", "ys", "yz"]
        attrs = {"alpha": 0.1} if op_type == "QLinearLeakyRelu" else {}
        if op_type == "QLinearAveragePool":  # MobileNet-style 3x3, padded, stride 2
            attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    model = _qoperator_model(op_type, inputs, c, attrs, order, dtype)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    with pm.PassContext(opt_level=3):
        got = codegen.build(from_onnx(model)).run(*inputs.values())
    assert got.dtype == want.dtype and got.shape == want.shape
    # QLinearAveragePool: ONNX Runtime averages in float too, in the same order
    exact = op_type in ("QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearAveragePool")
    assert np.abs(got.astype(int) - want.astype(int)).max() <= (0 if exact else 1)


@settings(deadline=None)
@given(
    dtype=st.sampled_from(["uint8", "int8"]),
    form=st.sampled_from([(13, -1), (13, 1), (12, 1), (12, 2)]),
    x_scale=st.floats(0.01, 0.3),
    seed=st.integers(0, 2**16),
)
def test_qlinear_softmax_is_onnxruntimes_algorithm(dtype, form, x_scale, seed) -> None:
    """QLinearSoftmax as ONNX Runtime computes it (its exponential table, floor(1 / Y_scale),
    saturation at the top): every output equal, for each opset's notion of the row."""
    opset, axis = form
    rng = np.random.default_rng(seed)
    low, high = (0, 256) if dtype == "uint8" else (-128, 128)
    a = rng.integers(low, high, (2, 6, 3, 16)).astype(dtype)
    c = {
        "as": np.array(x_scale, np.float32), "az": np.array(3).astype(dtype),
        "ys": np.array(1 / 256, np.float32),
        "yz": np.array(0 if dtype == "uint8" else -128).astype(dtype),
    }  # fmt: skip
    order = ["a", "as", "az", "ys", "yz"]
    attrs = {"opset": opset, "axis": axis}
    model = _qoperator_model("QLinearSoftmax", {"a": a}, c, attrs, order, dtype)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    with pm.PassContext(opt_level=3):
        got = codegen.build(from_onnx(model)).run(a)
    np.testing.assert_array_equal(got, want)


def test_channels_last_average_pool_is_refused_by_name() -> None:
    a = np.zeros((1, 7, 7, 16), np.uint8)
    c = {"as": np.array(0.02, np.float32), "az": np.array(3, np.uint8),
         "ys": np.array(0.02, np.float32), "yz": np.array(3, np.uint8)}  # fmt: skip
    attrs = {"kernel_shape": [3, 3], "channels_last": 1}
    model = _qoperator_model(
        "QLinearAveragePool", {"a": a}, c, attrs, ["a", "as", "az", "ys", "yz"], "uint8"
    )
    with pytest.raises(FrontendError, match="channels_last=1"):
        from_onnx(model)


@pytest.mark.parametrize("quantized_output", [True, False])
def test_qgemm_matches_onnxruntime(quantized_output: bool) -> None:
    """QGemm (transB, an int32 bias at scale a_scale * b_scale), quantized or float out."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (4, 64)).astype(np.uint8)
    c = {
        "as": np.array(0.02, np.float32), "az": np.array(120, np.uint8),
        "b": rng.integers(-63, 64, (24, 64)).astype(np.int8),  # 7 bits: no host saturates
        "bs": np.array(0.004, np.float32), "bz": np.array(0, np.int8),
        "c": rng.integers(-2000, 2000, 24).astype(np.int32),
        "ys": np.array(0.09, np.float32), "yz": np.array(128, np.uint8),
    }  # fmt: skip
    order = ["a", "as", "az", "b", "bs", "bz", "c"] + (["ys", "yz"] if quantized_output else [])
    out = "uint8" if quantized_output else "float32"
    model = _qoperator_model("QGemm", {"a": a}, c, {"transB": 1}, order, out)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    with pm.PassContext(opt_level=3):
        got = codegen.build(from_onnx(model)).run(a)
    if quantized_output:
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("trans_b", [1, 0])
def test_qgemm_with_a_scale_per_column_matches_onnxruntime(trans_b: int) -> None:
    """QGemm as quantize_static(per_channel=True) writes a classifier: B's scale and zero
    point per output column (B's axis 0 with transB, else 1); it failed to import. Its bias
    is dequantized as the QDQ form writes it (a vector of float32 products, zero points of
    that shape), so the per-channel rule forms the integer product (ViT-tiny U8S8 per
    channel, QOperator: its products were float, 1.49x ONNX Runtime; now 0.69x)."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (4, 64)).astype(np.uint8)
    b = rng.integers(-63, 64, (24, 64)).astype(np.int8)
    c = {
        "as": np.array(0.02, np.float32), "az": np.array(120, np.uint8),
        "b": b if trans_b else np.ascontiguousarray(b.T),
        "bs": rng.uniform(0.002, 0.006, 24).astype(np.float32), "bz": np.zeros(24, np.int8),
        "c": rng.integers(-2000, 2000, 24).astype(np.int32),
        "ys": np.array(0.09, np.float32), "yz": np.array(128, np.uint8),
    }  # fmt: skip
    order = ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"]
    model = _qoperator_model("QGemm", {"a": a}, c, {"transB": trans_b}, order, "uint8")
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    with pm.PassContext(opt_level=3):
        exe = codegen.build(from_onnx(model))
    np.testing.assert_array_equal(exe.run(a), want)
    assert any(op in exe.graph.kernels()[0].ops for op in ("qnn_dense", "qnn_matmul"))


def test_a_qlinearconv_per_channel_is_the_int8_kernel_and_equals_onnxruntime() -> None:
    """QLinearConv with a scale and a (zero) zero point per output channel, as ORT's
    quantizer writes the QOperator format: the weights' zero points spread along their
    axis 0 (they failed to import), the bias dequantized as the QDQ form writes it, so the
    per-channel rule forms qnn_conv2d (ResNet-18 so: 0 of 1,000 outputs differ)."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 8, 10, 10)).astype(np.uint8)
    c = {
        "xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8),
        "w": rng.integers(-63, 64, (16, 8, 3, 3)).astype(np.int8),  # 7 bits: no host saturates
        "ws": rng.uniform(0.002, 0.006, 16).astype(np.float32), "wz": np.zeros(16, np.int8),
        "ys": np.array(0.05, np.float32), "yz": np.array(128, np.uint8),
        "b": rng.integers(-2000, 2000, 16).astype(np.int32),
    }  # fmt: skip
    node = helper.make_node("QLinearConv", ["x", *c], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)],
        [numpy_helper.from_array(v, k) for k, v in c.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    data = model.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with pm.PassContext(opt_level=3):
        exe = codegen.build(from_onnx(data))
    np.testing.assert_array_equal(exe.run(x), want)
    assert "qnn_conv2d" in exe.graph.kernels()[0].ops


def test_the_float_groups_can_be_turned_off_for_speed() -> None:
    """onnx.onnxruntime_float_groups=false: every group an integer op, as with uint8."""
    model = _residual_block(16, 8, 3, 1, 0)
    assert "conv2d_mlas" in str(from_onnx(model))
    assert "conv2d_mlas" not in str(from_onnx(model, onnxruntime_float_groups=False))
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    with pm.PassContext(opt_level=3, config={"onnx.onnxruntime_float_groups": False}):
        integer = codegen.build(onnx.load_from_string(model))
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(integer.run(x) - want).max() <= 0.06 + 1e-6  # within one output quantum
