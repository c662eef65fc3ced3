"""Quantised (QDQ) models compute what ONNX Runtime's int8 kernels compute, bit for bit:
one convolution over random shapes, scales and zero points (hypothesis), a small CNN
quantised by onnxruntime.quantization, and ResNet-18 from the shared real models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.build import optimise
from egraph_ir import op
from egraph_ir.op.qnn import quantize_ref, requantize_ref
from egraph_ir.visitor import post_order

from ..hosts import ORT_INT8_EXACT, force_int8_kernels


@pytest.fixture(autouse=True, scope="module")
def _int8_kernels_on_any_cpu() -> Iterator[None]:
    """The int8 kernels are what these tests check, on any CPU (tests/hosts.py)."""
    with pytest.MonkeyPatch.context() as patch:
        force_int8_kernels(patch)
        yield


ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def _tensor(name: str, value: Any, dtype: Any) -> Any:
    return nh.from_array(np.asarray(value, dtype), name)


def qdq_conv(
    rng: np.random.Generator, c: int, o: int, size: int, k: int, groups: int, stride: int,
    scales: tuple[float, float, float], zeros: tuple[int, int], act: str, bias: bool,

) -> Any:  # fmt: skip
    """Q(x) -> DQ -> Conv(DQ(w), DQ(int32 bias)) -> Q -> (DQ), as quantize_static writes
    it: the bias scale is input scale * weight scale in float32. Outputs: the quantised
    result and its dequantized value."""
    sx, sw, sy = (np.float32(s) for s in scales)
    act_type = np.uint8 if act == "uint8" else np.int8
    w = rng.integers(-127, 128, (o, c // groups, k, k)).astype(np.int8)
    inits = [
        _tensor("sx", sx, np.float32), _tensor("zx", zeros[0], act_type),
        _tensor("wq", w, np.int8), _tensor("sw", sw, np.float32), _tensor("zw", 0, np.int8),
        _tensor("sy", sy, np.float32), _tensor("zy", zeros[1], act_type),
    ]  # fmt: skip
    nodes = [
        h.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        h.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        h.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"]),
    ]
    conv_inputs = ["xd", "wd"]
    if bias:
        inits += [
            _tensor("bq", rng.integers(-3000, 3000, o), np.int32),
            _tensor("sb", sx * sw, np.float32),
            _tensor("zb", 0, np.int32),
        ]
        nodes.append(h.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"]))
        conv_inputs.append("bd")
    p = k // 2
    nodes += [
        h.make_node("Conv", conv_inputs, ["c"], pads=[p] * 4, group=groups, strides=[stride] * 2),
        h.make_node("QuantizeLinear", ["c", "sy", "zy"], ["yq"]),
        h.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    out = (size + 2 * p - k) // stride + 1
    elem = T.UINT8 if act == "uint8" else T.INT8
    graph = h.make_graph(
        nodes,
        "qdq_conv",
        [h.make_tensor_value_info("x", T.FLOAT, [1, c, size, size])],
        [
            h.make_tensor_value_info("yq", elem, [1, o, out, out]),
            h.make_tensor_value_info("y", T.FLOAT, [1, o, out, out]),
        ],
        inits,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _session(model: Any) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])


def int8_reference(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What ONNX Runtime's int8 kernels compute: its outputs where they are exact (VNNI),
    else the interpreter of the integer program FakeQuantizationToInteger makes, which is
    what ONNX Runtime computes with VNNI (tests/hosts.py says why)."""
    if ORT_INT8_EXACT:
        return list(_session(model).run(None, feeds))
    with pm.PassContext():
        integer = pm.passes.FakeQuantizationToInteger()(ir.infer_type(ir.frontend.from_onnx(model)))
    out = ir.interpret(integer, *feeds.values())
    return list(out) if isinstance(out, tuple) else [out]


@given(
    shape=st.sampled_from(
        [(8, 16, 10, 3, 1, 1), (16, 16, 9, 3, 1, 16), (12, 8, 8, 1, 1, 1), (4, 8, 11, 3, 2, 1)]
    ),
    scales=st.tuples(*[st.floats(0.0009765625, 0.25, width=32)] * 3),
    zeros=st.tuples(st.integers(0, 255), st.integers(0, 255)),
    act=st.sampled_from(["uint8", "int8"]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=12, deadline=None)
def test_a_qdq_convolution_equals_onnxruntimes_int8_kernel(shape, scales, zeros, act, bias, seed):
    """With uint8 activations ONNX Runtime fuses this into QLinearConv (int32 sums, one
    float32 rescale); the interpreter after FakeQuantizationToInteger and the compiled
    program give the same integers, where the float chain was a quantum off at times. With
    int8 ones its x86 build keeps the group in float (the output's Q feeds the output and
    a DQ, so it stays int8 while the input's pair turns uint8: ort_islands.py), and so do
    we, in MLAS's order of sums (one group; grouped ones in ours, within a quantum)."""
    if act == "int8":
        zeros = (zeros[0] - 128, zeros[1] - 128)
    rng = np.random.default_rng(seed)
    c, o, size, k, stride, groups = shape[0], shape[1], shape[2], shape[3], shape[4], shape[5]
    model = qdq_conv(rng, c, o, size, k, groups, stride, scales, zeros, act, bias)
    x = (rng.standard_normal((1, c, size, size)) * 3).astype("float32")
    got_q, got = codegen.build(model).run(x=x)
    if act == "int8":
        want_q, want = _session(model).run(None, {"x": x})
        close = groups > 1  # summed in our order (conv2d_mlas covers one group and depthwise)
        assert np.abs(got_q.astype(int) - want_q.astype(int)).max() <= int(close)
        return
    want_q, want = int8_reference(model, {"x": x})
    np.testing.assert_array_equal(got_q, want_q)
    np.testing.assert_array_equal(got, want)
    mod = ir.frontend.from_onnx(model)
    with pm.PassContext():
        integer = pm.passes.FakeQuantizationToInteger()(ir.infer_type(mod))
    assert "qnn_conv2d" in str(integer) and "requantize" in str(integer)
    np.testing.assert_array_equal(ir.interpret(integer, x)[0], want_q)


def int8_kernels(exe: Any) -> int:
    """How many of an executable's kernels are int8 convolutions (codegen/lower/kernels/conv/int8.py)."""
    return sum(getattr(k, "variant", "").startswith("int8") for k in exe.graph.kernels())


def test_requantize_rounds_half_to_even_and_saturates() -> None:
    acc = np.array([5, 15, 25, -5, 1000, -1000], np.int32)
    m, zero = np.array(0.1, np.float32), np.array(3, np.uint8)
    assert requantize_ref(acc, m, zero).tolist() == [3, 5, 5, 3, 103, 0]
    x = np.array([0.5, 1.5, -0.5, 1e9, np.nan], np.float32)
    assert quantize_ref(x, np.array(1.0, np.float32), np.array(0, np.int8)).tolist() == [
        0, 2, 0, 127, -128,
    ]  # fmt: skip


@pytest.mark.parametrize("dtype", [T.INT8, T.UINT8])
@pytest.mark.parametrize("scale", [0.5, np.inf])
def test_nan_and_infinities_quantize_as_onnxruntime_does(dtype: int, scale: float) -> None:
    """A QuantizeLinear -> DequantizeLinear pair compiled, on NaN, infinities and finite
    values, by a finite scale and by inf (what quantize_static writes for a tensor an
    attention mask fills with -inf): NaN is the type's least value in ORT's x86 kernels
    (int8 -128), and its dequantized value follows (-inf), as ours now do (a symbolic
    BERT quantised S8S8 differed in 7,855 of 9,472 outputs by up to 0.26; 0 since)."""
    zero = np.array(3, np.int8 if dtype == T.INT8 else np.uint8)
    nodes = [
        h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    graph = h.make_graph(
        nodes, "qdq", [h.make_tensor_value_info("x", T.FLOAT, [10])],
        [h.make_tensor_value_info("q", dtype, [10]), h.make_tensor_value_info("y", T.FLOAT, [10])],
        [nh.from_array(np.array(scale, np.float32), "s"), nh.from_array(zero, "z")],
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, 1.0, -2.5, 300.0], "f4")
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with pm.PassContext(opt_level=3):
        got = codegen.build(ir.frontend.from_onnx(model)).run(x)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_softmax_over_a_symbolic_row_length_is_qlinearsoftmax() -> None:
    """QLinearSoftmax's table depends on the row's length; over a KV cache that length is
    symbolic, and the table is now computed when the program runs (as ONNX Runtime does)
    instead of the float chain, a quantum apart: GPT-2's decoder step quantised U8S8
    differed in 1,036 of 2,048 logits, 0 since. One compile, every length."""
    nodes = [
        h.make_node("DequantizeLinear", ["q", "s", "z"], ["x"]),
        h.make_node("Softmax", ["x"], ["y"], axis=-1),
        h.make_node("QuantizeLinear", ["y", "s2", "z2"], ["o"]),
    ]
    graph = h.make_graph(
        nodes, "softmax", [h.make_tensor_value_info("q", T.UINT8, [4, "total"])],
        [h.make_tensor_value_info("o", T.UINT8, [4, "total"])],
        [nh.from_array(np.array(0.0037132618, np.float32), "s"),
         nh.from_array(np.array(121, np.uint8), "z"),
         nh.from_array(np.array(1 / 255, np.float32), "s2"),
         nh.from_array(np.array(0, np.uint8), "z2")],
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 19)]).SerializeToString()
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pm.PassContext(opt_level=3):
        exe = codegen.build(ir.frontend.from_onnx(model))
    rng = np.random.default_rng(0)
    for total in (1, 5, 17, 64, 200):
        q = rng.integers(0, 256, (4, total)).astype(np.uint8)
        np.testing.assert_array_equal(exe.run(q), session.run(None, {"q": q})[0])


def test_canonicalised_products_stay_exact_past_float32_integers() -> None:
    """Weights large enough that a float32 sum could round: CanonicalizeQnn sums slices of
    input channels in float64 (or all of it), and the result equals the exact integers;
    so does the int8 kernel, which CanonicalizeQnn otherwise leaves the call to."""
    rng = np.random.default_rng(5)
    x = ir.var("x", shape=(1, 600, 3, 3), dtype="uint8")
    weights = rng.choice(np.array([-127, 127], np.int8), (4, 600, 3, 3))
    weights[0] = 127  # output channel 0 sums 600 * 9 * 127 * 255 > 2**24
    w = ir.const(weights)
    zx, zw = ir.const(np.array(0, np.uint8)), ir.const(np.array(0, np.int8))
    acc = ir.op.qnn_conv2d(x, w, zx, zw, padding=[1, 1, 1, 1])
    scaled = ir.op.requantize(
        acc, ir.const(np.array(1e-6, np.float32)), ir.const(np.array(9, np.int8))
    )
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], ir.Tuple([acc, scaled]))))
    with pm.PassContext(config={"qnn.integer_kernels": False}):
        lowered = pm.passes.CanonicalizeQnn()(mod)
        floats = codegen.build(mod)
    assert "float64" in str(lowered) and "qnn_conv2d" not in str(lowered)
    integers = codegen.build(mod)
    assert int8_kernels(integers) == 1
    value = np.full((1, 600, 3, 3), 255, np.uint8)
    want = ir.interpret(mod, value)
    assert np.abs(want[0]).max() > 2**24  # the case float32 alone would round
    for got in (ir.interpret(lowered, value), floats.run(x=value), integers.run(x=value)):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("depth, zeros", [(64, (134, 127)), (197, (0, 123)), (300, (0, 0))])
def test_a_product_of_two_activations_sums_in_float32_where_its_depth_allows(
    depth: int, zeros: tuple[int, int]
) -> None:
    """Attention's QK^T and PV (both operands 8-bit activations): float32 where depth x the
    largest |b - zero point| x 255 stays below 2**24 (ViT-tiny's 64 and 197), float64
    beyond; exact either way, at the extremes of both operands."""
    a = ir.var("a", shape=(3, 5, depth), dtype="uint8")
    b = ir.var("b", shape=(3, depth, 7), dtype="uint8")
    za, zb = (ir.const(np.array(z, np.uint8)) for z in zeros)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([a, b], ir.op.qnn_matmul(a, b, za, zb))))
    lowered = pm.passes.CanonicalizeQnn()(mod)
    wide = 255 * depth * max(zeros[1], 255 - zeros[1]) >= 2**24
    assert ("float64" in str(lowered)) == wide
    far = {"a": np.full((3, 5, depth), 255 if zeros[0] < 128 else 0, np.uint8)}
    far["b"] = np.full((3, depth, 7), 255 if zeros[1] < 128 else 0, np.uint8)
    want = ir.interpret(mod, **far)
    np.testing.assert_array_equal(codegen.build(lowered).run(**far), want)


def _float_model(
    path: Path, nodes: list[Any], weights: dict[str, tuple[int, ...]], seed: int, scale: float,
    x_shape: list[int], y_shape: list[int],
) -> Path:  # fmt: skip
    """A float ONNX model x -> y of `nodes`, its weights random (in `weights` order)."""
    rng = np.random.default_rng(seed)
    inits = [
        nh.from_array((rng.standard_normal(shape) * scale).astype("float32"), name)
        for name, shape in weights.items()
    ]
    graph = h.make_graph(
        nodes, path.stem, [h.make_tensor_value_info("x", T.FLOAT, x_shape)],
        [h.make_tensor_value_info("y", T.FLOAT, y_shape)], inits,
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def _small_cnn(path: Path) -> Path:
    """conv-relu, conv-relu + a residual add, max pool, global pool and a Gemm, float."""
    weights = {"w1": (8, 3, 3, 3), "b1": (8,), "w2": (8, 8, 3, 3), "b2": (8,), "wf": (10, 8)}
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4),
        h.make_node("Relu", ["c2"], ["r2"]),
        h.make_node("Add", ["r1", "r2"], ["s"]),
        h.make_node("MaxPool", ["s"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("GlobalAveragePool", ["m"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    return _float_model(path, nodes, {**weights, "bf": (10,)}, 0, 0.2, [1, 3, 16, 16], [1, 10])


def _quantize_static(
    float_path: Path,
    out: Path,
    shape: tuple[int, ...],
    name: str,
    form: str = "QDQ",
    per_channel: bool = False,
    activations: str = "uint8",
) -> Path:
    """The model quantised by onnxruntime.quantization: QDQ, or QOperator (QLinearConv);
    weight scales per tensor or per output channel; uint8 or int8 activations."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    kind = quantization.QuantType.QInt8 if activations == "int8" else quantization.QuantType.QUInt8

    class Batches(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(0)
            self.items = iter(
                [{name: rng.standard_normal(shape).astype("float32")} for _ in range(2)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    quantization.quantize_static(
        str(float_path), str(out), Batches(),
        quant_format=getattr(quantization.QuantFormat, form),
        activation_type=kind,
        weight_type=quantization.QuantType.QInt8, per_channel=per_channel,
    )  # fmt: skip
    return out


def _equal_to_onnxruntime(
    float_path: Path, shape: tuple[int, ...], per_channel: bool, opt_level: int
) -> Any:
    """The model quantised by onnxruntime.quantization, compiled at `opt_level`: its
    output equals ONNX Runtime's int8 run, bit for bit; the executable."""
    model = _quantize_static(
        float_path, float_path.with_name("q.onnx"), shape, "x", per_channel=per_channel
    )
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    want = int8_reference(onnx.load(str(model)), {"x": x})[0]
    with pm.PassContext(opt_level=opt_level):
        exe = codegen.build(str(model))
    np.testing.assert_array_equal(exe.run(x=x), want)
    return exe


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_cnn_quantised_by_onnxruntime_equals_its_int8_run(
    tmp_path: Path, per_channel: bool
) -> None:
    """Weight scales per tensor, or per output channel (the rules' per-channel forms:
    the bias scale and the requantize multiplier per channel)."""
    exe = _equal_to_onnxruntime(_small_cnn(tmp_path / "cnn.onnx"), (1, 3, 16, 16), per_channel, 2)
    assert int8_kernels(exe) == 3  # both convolutions and the Gemm; the pool takes bytes
    pools = [k for k in exe.graph.kernels() if "max_pool2d" in k.ops]
    assert [k.ops for k in pools] == [["max_pool2d"]], [k.ops for k in pools]


def _silu_cnn(path: Path) -> Path:
    """EfficientNet's pattern, float: a conv and a stride-2 depthwise conv, each followed
    by SiLU (x * sigmoid(x)), a squeeze-and-excitation gate (a pool, a sigmoid, a product),
    then a pool and a Gemm."""
    weights = {"w1": (16, 3, 3, 3), "b1": (16,), "w2": (16, 1, 3, 3), "b2": (16,)}
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
        h.make_node("Sigmoid", ["c1"], ["s1"]),
        h.make_node("Mul", ["c1", "s1"], ["a1"]),
        h.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1] * 4, strides=[2, 2], group=16),
        h.make_node("Sigmoid", ["c2"], ["s2"]),
        h.make_node("Mul", ["c2", "s2"], ["a2"]),
        h.make_node("GlobalAveragePool", ["a2"], ["squeeze"]),
        h.make_node("Sigmoid", ["squeeze"], ["gate"]),
        h.make_node("Mul", ["a2", "gate"], ["excited"]),
        h.make_node("GlobalAveragePool", ["excited"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    weights = {**weights, "wf": (10, 16), "bf": (10,)}
    return _float_model(path, nodes, weights, 5, 0.3, [1, 3, 32, 32], [1, 10])


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantised_silus_are_table_reads_equal_to_onnxruntime(
    tmp_path: Path, per_channel: bool
) -> None:
    """Each quantised SiLU (QLinearSigmoid's table, then QLinearMul) is one table read in
    its convolution's epilogue (TabulateByteFunctions), the squeeze pool reads the bytes
    with its dequantize fused in, and the output equals ONNX Runtime's int8 run."""
    exe = _equal_to_onnxruntime(_silu_cnn(tmp_path / "silu.onnx"), (1, 3, 32, 32), per_channel, 3)
    ops = [k.ops for k in exe.graph.kernels()]
    silu = ["qnn_conv2d", "bias_add", "requantize", "take"]  # QLinearMul's product gone
    assert [o for o in ops if "qnn_conv2d" in o] == [silu, silu], ops
    squeeze = next(o for o in ops if "global_avg_pool2d" in o)  # the first: the SiLU bytes
    assert "cast" in squeeze[: squeeze.index("global_avg_pool2d")], ops  # dequantize fused in


def _conv_stack(path: Path) -> Path:
    """conv-relu and a stride-2 conv, float: QOperator quantisation makes it QLinearConvs."""
    rng = np.random.default_rng(4)
    inits = [
        nh.from_array((rng.standard_normal(s) * 0.2).astype("float32"), n)
        for n, s in (("w1", (16, 3, 3, 3)), ("b1", (16,)), ("w2", (32, 16, 3, 3)), ("b2", (32,)))
    ]
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1] * 4, strides=[2, 2]),
    ]
    graph = h.make_graph(
        nodes, "convs", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 32, 8, 8])], inits,
    )  # fmt: skip
    path.write_bytes(
        h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    )
    return path


def test_a_qoperator_model_runs_its_qlinearconvs_as_int8_kernels(tmp_path: Path) -> None:
    """QLinearConv imports as the QDQ chain it stands for, which the rules make integer:
    the same int8 kernels, ONNX Runtime's result bit for bit."""
    model = _quantize_static(
        _conv_stack(tmp_path / "c.onnx"), tmp_path / "q.onnx", (1, 3, 16, 16), "x", "QOperator"
    )
    assert "QLinearConv" in {n.op_type for n in onnx.load(str(model)).graph.node}
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype("float32")
    want = int8_reference(onnx.load(str(model)), {"x": x})[0]
    exe = codegen.build(str(model))
    np.testing.assert_array_equal(exe.run(x=x), want)
    assert int8_kernels(exe) == 2


def test_egc_compile_check_says_a_quantised_model_is_bit_for_bit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check compares the quantised program with the interpreter of its integer forms
    and with ONNX Runtime, and says how exactly they agree; the profile shows the int8
    kernels. On this CPU as it is (not the module's pretended VNNI): where ONNX Runtime
    sums in saturating pairs, so do ours and the check's reference (OnnxRuntimeSums)."""
    from codegen.llvm import mathlib
    from egc.cli.main import main
    from egraph_ir.op import mlas

    monkeypatch.setattr("codegen.lower.kernels.conv.shape.host_has_vnni", mathlib.host_has_vnni)
    monkeypatch.setattr(
        "passmgr.passes.onnxruntime_sums.onnxruntime_saturates", mlas.onnxruntime_saturates
    )

    model = _quantize_static(
        _small_cnn(tmp_path / "cnn.onnx"), tmp_path / "q.onnx", (1, 3, 16, 16), "x"
    )
    assert main(["compile", str(model), "--check", "--profile", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert out.count("(agrees, bit for bit)") == 2, out
    assert "conv/int8" in out and "conv/direct" not in out, out


REAL = Path(__file__).resolve().parents[3] / "shared" / "models" / "real"


def _real(name: str, opt_level: int) -> Any:
    missing = not (REAL / f"{name}.onnx").exists()
    skip = pytest.mark.skipif(missing, reason="no ../shared/models/real")
    return pytest.param(name, opt_level, marks=skip, id=name)


@pytest.mark.full
@pytest.mark.parametrize(
    ("name", "opt_level"),
    # EfficientNet-B0 at opt level 3: the SiLU tables, integer requantizes and fused
    # squeeze pools beside its blocked float layers
    [_real("resnet18", 2), _real("efficientnet_b0", 3)],
)
def test_a_qdq_real_model_equals_onnxruntimes_int8_output(
    tmp_path: Path, name: str, opt_level: int
) -> None:
    quantization = pytest.importorskip("onnxruntime.quantization")
    pre = tmp_path / "pre.onnx"
    quantization.shape_inference.quant_pre_process(
        str(REAL / f"{name}.onnx"), str(pre), skip_symbolic_shape=True
    )
    model = _quantize_static(pre, tmp_path / "q.onnx", (1, 3, 224, 224), "input")
    x = np.load(REAL / f"{name}.npz")["input"]
    want = int8_reference(onnx.load(str(model)), {"input": x})[0]
    with pm.PassContext(opt_level=opt_level):
        exe = codegen.build(str(model))
    np.testing.assert_array_equal(exe.run(input=x), want)


def _mlp(path: Path) -> Path:
    """Two float MatMul + Add + Relu layers (what quantize_dynamic rewrites)."""
    rng = np.random.default_rng(4)
    inits = [
        nh.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)
        for name, shape in (("w1", (32, 48)), ("b1", (48,)), ("w2", (48, 8)), ("b2", (8,)))
    ]
    nodes = [
        h.make_node("MatMul", ["x", "w1"], ["m1"]),
        h.make_node("Add", ["m1", "b1"], ["a1"]),
        h.make_node("Relu", ["a1"], ["r1"]),
        h.make_node("MatMul", ["r1", "w2"], ["m2"]),
        h.make_node("Add", ["m2", "b2"], ["y"]),
    ]
    graph = h.make_graph(
        nodes,
        "mlp",
        [h.make_tensor_value_info("x", T.FLOAT, [4, 32])],
        [h.make_tensor_value_info("y", T.FLOAT, [4, 8])],
        inits,
    )
    path.write_bytes(
        h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()
    )
    return path


def test_a_dynamically_quantised_mlp_matches_onnxruntime(tmp_path: Path) -> None:
    """DynamicQuantizeLinear + MatMulInteger: the integer products are the IR's qnn_matmul
    (exact, then a float32 GEMM where that is exact); the float results agree with ONNX
    Runtime to float32 rounding (its MatMulIntegerToFloat scales in another order)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    model = tmp_path / "dyn.onnx"
    quantization.quantize_dynamic(str(_mlp(tmp_path / "mlp.onnx")), str(model))
    mod = ir.frontend.from_onnx(str(model))
    assert "qnn_matmul" in str(mod)
    x = np.random.default_rng(5).standard_normal((4, 32)).astype("float32")
    want = int8_reference(onnx.load(str(model)), {"x": x})[0]
    np.testing.assert_allclose(codegen.build(mod).run(x=x), want, rtol=1e-5, atol=1e-5)


def _per_channel_conv(bias_scale_nudge: float) -> ir.IRModule:
    """dequantize -> conv2d (weight scales per output channel) + int32 bias -> quantize;
    the bias scale of channel 1 nudged by a factor."""
    rng = np.random.default_rng(8)
    x = ir.var("x", shape=(1, 2, 5, 5), dtype="uint8")
    sx = np.float32(0.02)
    sw = np.array([0.01, 0.003, 0.007], np.float32).reshape(3, 1, 1, 1)
    sb = (sx * sw).reshape(3)
    sb[1] = np.float32(sb[1] * bias_scale_nudge)
    c = ir.const
    xd = op.dequantize(x, c(sx), c(np.array(3, np.uint8)))
    w = rng.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8)
    wd = op.dequantize(c(w), c(sw), c(np.zeros((3, 1, 1, 1), np.int8)))
    bd = op.dequantize(c(np.array([50, -20, 7], np.int32)), c(sb), c(np.zeros(3, np.int32)))
    y = op.bias_add(op.conv2d(xd, wd, padding=[1] * 4), bd, axis=1)
    q = op.quantize(y, c(np.float32(0.05)), c(np.array(128, np.uint8)))
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], q)))


def test_per_channel_bias_scales_must_be_the_float32_products() -> None:
    """The per-channel rule's guard compares every channel's bias scale with input scale x
    weight scale in float32 (`values(?sb) == f32_product(values(?sx), values(?sw))`):
    one channel off by a float32 step and the chain stays float, as it must (the int32
    bias would mean something else); exact, it becomes the int8 kernel."""
    with pm.PassContext():
        exact = pm.passes.FakeQuantizationToInteger()(_per_channel_conv(1.0))
        nudged = pm.passes.FakeQuantizationToInteger()(_per_channel_conv(1.0 + 2**-22))
    assert "qnn_conv2d" in str(exact) and "qnn_conv2d" not in str(nudged)
    mod = _per_channel_conv(1.0)
    value = np.random.default_rng(9).integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    exe = codegen.build(mod)
    assert int8_kernels(exe) == 1
    np.testing.assert_array_equal(exe.run(x=value), ir.interpret(exact, value))


def test_a_float_path_requantize_keeps_its_multiplier_out_of_the_weights() -> None:
    """A small depthwise layer per channel (under 15 x 15: CanonicalizeQnn's exact float
    path): the convolution sums the integer weights exactly and the per-channel
    multiplier is applied to the sum, rounded once, as ONNX Runtime requantizes. As a
    plain multiply FoldScaleAxis folded it into the weights, and the reassociated sums
    moved a MobileNetV2 output by a quantum (1 of 75,264)."""
    rng = np.random.default_rng(10)
    c = ir.const
    x = ir.var("x", shape=(1, 8, 10, 10), dtype="uint8")
    sx, sw = np.float32(0.02), rng.uniform(0.002, 0.02, (8, 1, 1, 1)).astype(np.float32)
    w = rng.integers(-127, 128, (8, 1, 3, 3)).astype(np.int8)
    xd = op.dequantize(x, c(sx), c(np.array(3, np.uint8)))
    wd = op.dequantize(c(w), c(sw), c(np.zeros((8, 1, 1, 1), np.int8)))
    sb = (sx * sw).reshape(8)
    bd = op.dequantize(c(rng.integers(-500, 500, 8).astype(np.int32)), c(sb), c(np.zeros(8, np.int32)))  # fmt: skip
    y = op.bias_add(op.conv2d(xd, wd, padding=[1] * 4, groups=8), bd, axis=1)
    q = op.quantize(y, c(np.float32(0.05)), c(np.array(128, np.uint8)))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], q)))
    with pm.PassContext(opt_level=3):
        exact = pm.passes.FakeQuantizationToInteger()(mod)
        optimised = optimise(mod, None)
        exe = codegen.build(mod)
    assert "qnn_conv2d" in str(exact)
    convs = [n for n in post_order(optimised["main"].body) if getattr(getattr(n, "op", None), "name", "") == "conv2d"]  # fmt: skip
    for conv in convs:  # the float path's weights are the int8 weights themselves
        weights = conv.args[1].data
        np.testing.assert_array_equal(weights, np.round(weights))
    value = rng.integers(0, 256, (1, 8, 10, 10)).astype(np.uint8)
    np.testing.assert_array_equal(exe.run(x=value), ir.interpret(exact, value))
