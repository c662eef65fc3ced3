"""OnnxRuntimeSums (passmgr/passes/onnxruntime_sums.py): uint8 x int8 products summed as
ONNX Runtime's kernels on this CPU sum them. The references of the saturating sums, and on
whatever CPU the suite runs (exact sums with VNNI, saturating pairs without) the compiled
QLinearConv (even and odd channel counts), a QDQ Gemm, MatMulInteger and ConvInteger (exact
there) equal ONNX Runtime's bit for bit on data whose byte pairs overflow int16."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir.op.qnn import qnn_conv2d_ref, qnn_dense_ref

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402


def test_saturating_pairs_cross_taps_in_mlas_order() -> None:
    """Three channels: k runs (row, column, channel), so the second pair holds the last
    channel of tap 0 and the first of tap 1; each pair clips at 32767, the zero point's
    share comes off exactly."""
    x = np.full((1, 3, 1, 2), 255, np.uint8)
    w = np.full((1, 3, 1, 2), 127, np.int8)
    zero, no_shift = np.array(5, np.uint8), np.array(0, np.int8)
    saturating = qnn_conv2d_ref(x, w, zero, no_shift, (1, 1), (0, 0, 0, 0), (1, 1), 1, "saturating")
    exact = qnn_conv2d_ref(x, w, zero, no_shift, (1, 1), (0, 0, 0, 0), (1, 1), 1)
    assert exact.item() == 6 * 250 * 127
    assert saturating.item() == 3 * 32767 - 5 * 6 * 127  # three pairs of 2 * 255 * 127
    dense = qnn_dense_ref(x.reshape(1, 6), w.reshape(1, 6), zero, no_shift, "saturating")
    assert dense.item() == saturating.item()


def _session_output(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _model(nodes: list[Any], inputs: list[Any], inits: dict[str, Any], form: str = "") -> Any:
    tensors = [nh.from_array(np.asarray(v), k) for k, v in inits.items()]
    out = h.make_tensor_value_info("y", T.INT32 if form == "MatMulInteger" else T.UINT8, None)
    # form "MatMulInteger": any node with an int32 result
    graph = h.make_graph(nodes, "g", inputs, [out], tensors)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _scales(zero: int) -> dict[str, np.ndarray]:
    return {
        "xs": np.array(0.02, np.float32), "xz": np.array(zero, np.uint8),
        "ws": np.array(0.01, np.float32), "wz": np.array(0, np.int8),
        "ys": np.array(150.0, np.float32), "yz": np.array(128, np.uint8),
    }  # fmt: skip


def _overflowing(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """int8 weights most of which are 127: pairs of them times bytes near 255 overflow."""
    return np.where(rng.random(shape) < 0.75, 127, rng.integers(-128, 128, shape)).astype(np.int8)


@pytest.mark.parametrize(("channels", "kernel"), [(8, 3), (3, 3), (5, 1), (16, 1)])
def test_a_qlinearconv_equals_onnxruntime_on_this_cpu(channels: int, kernel: int) -> None:
    rng = np.random.default_rng(channels * 10 + kernel)
    x = rng.integers(180, 256, (1, channels, 7, 6)).astype(np.uint8)
    inits = {**_scales(7), "w": _overflowing(rng, (16, channels, kernel, kernel))}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    pads = [kernel // 2] * 4
    node = h.make_node("QLinearConv", names, ["y"], pads=pads, kernel_shape=[kernel] * 2)
    model = _model([node], [h.make_tensor_value_info("x", T.UINT8, list(x.shape))], inits)
    with pm.PassContext(opt_level=2) as ctx:
        exe = codegen.build(model)
    np.testing.assert_array_equal(exe.run(x=x), _session_output(model, {"x": x}))
    report = ctx.run.last("OnnxRuntimeSums", pm.passes.SumsReport)
    assert report is not None and (report.saturating > 0) == _saturates()


def test_a_convinteger_stays_exact_as_in_onnxruntime() -> None:
    """ConvInteger's int32 sums are exact in ONNX Runtime on every CPU: not marked."""
    rng = np.random.default_rng(2)
    x = rng.integers(180, 256, (1, 4, 6, 6)).astype(np.uint8)
    inits = {"w": _overflowing(rng, (8, 4, 3, 3)), "xz": np.array(7, np.uint8)}
    node = h.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1] * 4)
    inputs = [h.make_tensor_value_info("x", T.UINT8, [1, 4, 6, 6])]
    model = _model([node], inputs, inits, "MatMulInteger")  # an int32 result
    np.testing.assert_array_equal(codegen.build(model).run(x=x), _session_output(model, {"x": x}))


def _saturates() -> bool:
    from egraph_ir.op.mlas import onnxruntime_saturates

    return onnxruntime_saturates()


@pytest.mark.parametrize("form", ["QDQ", "QDQ MatMul", "MatMulInteger"])
def test_products_equal_onnxruntime_on_this_cpu(form: str) -> None:
    """A Gemm or MatMul between DequantizeLinear and QuantizeLinear (quantize_static's form
    of a classifier or projection, which ONNX Runtime fuses into its uint8 x int8 QGemm or
    QLinearMatMul; the rules qdq-dense and qdq-matmul) and MatMulInteger (quantize_dynamic's)."""
    rng = np.random.default_rng(4)
    a = rng.integers(200, 256, (12, 64)).astype(np.uint8)
    inits = {**_scales(3), "b": _overflowing(rng, (64, 32))}
    if form.startswith("QDQ"):
        gemm = form == "QDQ"
        if gemm:
            inits["b"] = inits["b"].T.copy()  # (N, K): a Gemm with transB, a dense product
        product = h.make_node("Gemm", ["ad", "bd"], ["m"], transB=1) if gemm else (
            h.make_node("MatMul", ["ad", "bd"], ["m"])
        )  # fmt: skip
        nodes = [
            h.make_node("DequantizeLinear", ["a", "xs", "xz"], ["ad"]),
            h.make_node("DequantizeLinear", ["b", "ws", "wz"], ["bd"]),
            product,
            h.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"]),
        ]
    else:
        nodes = [h.make_node("MatMulInteger", ["a", "b", "xz", "wz"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("a", T.UINT8, [12, 64])], inits, form)
    exe = codegen.build(model)
    np.testing.assert_array_equal(exe.run(a=a), _session_output(model, {"a": a}))


def test_always_saturating_kernels_equal_the_interpreter_of_the_marked_program() -> None:
    """`qnn.saturating_pairs=always` on any CPU: the int8 kernels' vpmaddubsw path and the
    columns of an odd channel count compute what the references of the marked calls do;
    `never` keeps the exact sums."""
    rng = np.random.default_rng(9)
    x = ir.var("x", shape=(1, 3, 9, 9), dtype="uint8")
    zero, no_shift = ir.const(np.array(11, np.uint8)), ir.const(np.array(0, np.int8))
    stem = ir.op.qnn_conv2d(x, ir.const(_overflowing(rng, (16, 3, 3, 3))), zero, no_shift,
                            padding=[1] * 4)  # fmt: skip
    scale, out_zero = ir.const(np.float32(2e-4)), ir.const(np.array(0, np.uint8))
    y = ir.op.requantize(stem, scale, out_zero)
    body = ir.op.qnn_conv2d(y, ir.const(_overflowing(rng, (16, 16, 3, 3))), out_zero, no_shift,
                            padding=[1] * 4)  # fmt: skip
    fn = ir.Function([x], ir.op.requantize(body, scale, out_zero))
    value = rng.integers(150, 256, (1, 3, 9, 9)).astype(np.uint8)
    outs = {}
    for mode in ("always", "never"):
        with pm.PassContext(config={"qnn.saturating_pairs": mode}) as ctx:
            exe = codegen.build(fn)
            marked = pm.Sequential([pm.passes.InferType(), pm.passes.OnnxRuntimeSums()])(
                ir.IRModule.from_expr(fn)
            )
        report = ctx.run.last("OnnxRuntimeSums", pm.passes.SumsReport)
        assert report is not None and report.saturating == (2 if mode == "always" else 0)
        outs[mode] = exe.run(x=value)
        np.testing.assert_array_equal(outs[mode], ir.interpret(marked, x=value))
    assert (outs["always"] != outs["never"]).any()  # the data overflows pairs
