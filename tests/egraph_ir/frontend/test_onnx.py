"""ONNX import: each supported op against onnxruntime, the reference models, and bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import codegen
import egraph_ir as ir
from egraph_ir import models
from egraph_ir.frontend import from_onnx, supported_ops
from egraph_ir.testing import assert_allclose

from ..onnx_single_op import ort, run_model, single_op_model

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(0)


def recurrent_cases() -> list[tuple]:
    """LSTM/GRU/RNN one-node cases: directions, states, peepholes, lengths, layout, clip."""
    seq, batch, size, hidden = 5, 2, 3, 4
    g = np.random.default_rng(5)

    def w(*shape: int) -> np.ndarray:
        return g.uniform(-0.6, 0.6, shape).astype("float32")

    x = w(seq, batch, size)
    out = []
    for kind, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        n_out = 3 if kind == "LSTM" else 2
        for dirs, direction in ((1, "forward"), (2, "bidirectional"), (1, "reverse")):
            inits = {
                1: w(dirs, gates * hidden, size),
                2: w(dirs, gates * hidden, hidden),
                3: w(dirs, 2 * gates * hidden),
            }
            inputs = [x, None, None, None, None, w(dirs, batch, hidden)]
            if kind == "LSTM":
                inputs.append(w(dirs, batch, hidden))
                inits[7] = w(dirs, 3 * hidden)
            attrs = {"hidden_size": hidden, "direction": direction}
            out.append((kind, inputs, attrs, inits, n_out))
    lens = {4: np.array([5, 3], "int32")}
    base = {"hidden_size": hidden}
    lstm = {1: w(1, 4 * hidden, size), 2: w(1, 4 * hidden, hidden)}
    gru = {1: w(1, 3 * hidden, size), 2: w(1, 3 * hidden, hidden), 3: w(1, 6 * hidden)}
    out += [
        ("LSTM", [x], {**base, "clip": 0.5, "input_forget": 1}, lstm, 3),
        ("LSTM", [x], base, {**lstm, **lens}, 3),
        ("GRU", [x], {**base, "linear_before_reset": 1}, gru, 2),
        ("GRU", [x], base, {**gru, **lens}, 2),
    ]
    return out


def rnd(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.uniform(-3, 3, size=shape).astype(dtype)


def i64(*v: int) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


X = rnd(2, 3, 4)
IMG = rnd(1, 4, 6, 6)
RECURRENT = recurrent_cases()
CASES: list[tuple[str, list[Any], dict[str, Any], dict[int, Any], int]] = [
    *[(u, [X], {}, {}, 1) for u in ["Relu", "Tanh", "Sigmoid", "Exp", "Abs", "Neg", "Floor",
                                     "Ceil", "Round", "Sign", "Sin", "Cos", "Erf", "Reciprocal",
                                     "Identity"]],
    ("Log", [np.abs(X) + 0.1], {}, {}, 1),
    ("Sqrt", [np.abs(X)], {}, {}, 1),
    ("Not", [X > 0], {}, {}, 1),
    *[(b, [X, rnd(3, 4)], {}, {}, 1) for b in ["Add", "Sub", "Mul", "Div", "Equal", "Less",
                                               "LessOrEqual", "Greater", "GreaterOrEqual"]],
    ("Pow", [np.abs(X) + 0.5, rnd(4)], {}, {}, 1),
    ("And", [X > 0, X < 1], {}, {}, 1),
    ("Or", [X > 0, X < -1], {}, {}, 1),
    ("Max", [X, rnd(4), rnd(3, 1)], {}, {}, 1),
    ("Min", [X, rnd(4)], {}, {}, 1),
    ("Sum", [X, rnd(4), X], {}, {}, 1),
    ("Mean", [X, rnd(4)], {}, {}, 1),
    ("Where", [X > 0, X, rnd(4)], {}, {}, 1),
    ("LeakyRelu", [X], {"alpha": 0.2}, {}, 1),
    ("Gelu", [X], {"approximate": "tanh"}, {}, 1),
    ("Clip", [X], {}, {1: np.float32(-1), 2: np.float32(2)}, 1),
    ("Clip", [X], {}, {2: np.float32(0.5)}, 1),
    ("Cast", [X], {"to": onnx.TensorProto.INT32}, {}, 1),
    ("Dropout", [X], {}, {}, 1),
    ("MatMul", [X, rnd(4, 5)], {}, {}, 1),
    ("Gemm", [rnd(3, 4), rnd(5, 4), rnd(5)], {"transB": 1, "alpha": 0.5, "beta": 2.0}, {}, 1),
    ("Gemm", [rnd(4, 3), rnd(4, 5)], {"transA": 1}, {}, 1),
    ("Conv", [IMG, rnd(8, 4, 3, 3), rnd(8)], {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {}, 1),
    ("Conv", [IMG, rnd(4, 2, 3, 3)], {"group": 2, "auto_pad": "SAME_UPPER"}, {}, 1),
    ("Conv", [IMG, rnd(2, 4, 2, 2)], {"auto_pad": "SAME_LOWER"}, {}, 1),
    ("Conv", [IMG, rnd(2, 4, 2, 2)], {"dilations": [2, 2], "pads": [0, 1, 1, 0]}, {}, 1),
    ("MaxPool", [IMG], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, {}, 1),
    ("AveragePool", [IMG], {"kernel_shape": [2, 2], "count_include_pad": 1, "pads": [0, 0, 1, 1]},
     {}, 1),
    ("GlobalAveragePool", [IMG], {}, {}, 1),
    ("BatchNormalization", [IMG, rnd(4), rnd(4), rnd(4), np.abs(rnd(4)) + 0.5],
     {"epsilon": 1e-3}, {}, 1),
    ("LayerNormalization", [X, rnd(4), rnd(4)], {"epsilon": 1e-5}, {}, 1),
    ("LayerNormalization", [X, rnd(3, 4)], {"axis": 1}, {}, 1),
    ("Softmax", [X], {"axis": 1}, {}, 1),
    ("LogSoftmax", [X], {}, {}, 1),
    ("Reshape", [X], {}, {1: i64(0, -1)}, 1),
    ("Flatten", [X], {"axis": 2}, {}, 1),
    ("Transpose", [X], {"perm": [2, 0, 1]}, {}, 1),
    ("Transpose", [X], {}, {}, 1),
    ("Unsqueeze", [X], {}, {1: i64(0, -1)}, 1),
    ("Squeeze", [rnd(2, 1, 4, 1)], {}, {1: i64(1)}, 1),
    ("Squeeze", [rnd(2, 1, 4, 1)], {}, {}, 1),
    ("Concat", [X, rnd(2, 2, 4)], {"axis": 1}, {}, 1),
    ("Split", [rnd(2, 6)], {"axis": 1}, {1: i64(2, 4)}, 2),
    ("Split", [rnd(7, 2)], {"num_outputs": 3}, {}, 3),
    ("Slice", [X], {}, {1: i64(0, 1), 2: i64(2, 4), 3: i64(0, 2), 4: i64(1, 2)}, 1),
    ("Slice", [X], {}, {1: i64(-1), 2: i64(-100), 3: i64(1), 4: i64(-1)}, 1),
    ("Gather", [X], {"axis": 1}, {1: i64(2, -1, 0)}, 1),
    ("Expand", [rnd(3, 1)], {}, {1: i64(2, 1, 4)}, 1),
    ("ReduceMean", [X], {"keepdims": 0}, {1: i64(1)}, 1),
    ("ReduceSum", [X], {}, {1: i64(0, 2)}, 1),
    ("ReduceMax", [X], {}, {}, 1),
    ("ReduceMin", [X], {"keepdims": 0}, {1: i64(-1)}, 1),
    ("ReduceProd", [X], {}, {1: i64(2)}, 1),
    ("ArgMax", [X], {"axis": 1, "keepdims": 0}, {}, 1),
    ("Pad", [X], {"mode": "constant"}, {1: i64(0, 1, 2, 0, 0, 1), 2: np.float32(0.5)}, 1),
    ("Pad", [X], {"mode": "reflect"}, {1: i64(0, 1, 1, 0, 1, 2)}, 1),
    ("Shape", [X], {"start": 1}, {}, 1),
    ("GatherElements", [X], {"axis": 1}, {1: np.array([[[0, -1, 2, 1]], [[2, 1, -3, 0]]], "int64")}, 1),
    ("ConstantOfShape", [], {"value": onnx.numpy_helper.from_array(np.array([2.5], "float32"))},
     {0: i64(2, 3)}, 1),
    *RECURRENT,
    ("CastLike", [X, np.zeros(1, "int32")], {}, {}, 1),
    ("Size", [X], {}, {}, 1),
    ("Range", [], {}, {0: np.array(1.5, "float32"), 1: np.array(7.0, "float32"),
                       2: np.array(1.25, "float32")}, 1),
    ("ArgMin", [X], {"axis": 1, "keepdims": 0}, {}, 1),
    ("ArgMin", [np.array([[3, -128, 5], [-128, 2, 2]], "int8")], {"axis": 1}, {}, 1),
    ("ReduceL1", [X], {"keepdims": 0}, {1: i64(1)}, 1),
    ("ReduceL2", [X], {}, {1: i64(0, 2)}, 1),
    ("ReduceLogSum", [np.abs(X) + 0.5], {}, {1: i64(2)}, 1),
    ("ReduceLogSumExp", [X * 40], {"keepdims": 0}, {1: i64(1)}, 1),
    ("ReduceSumSquare", [X], {}, {}, 1),
    ("Mod", [np.array([-7, 7, 6], "int32"), np.array([3, -3, 4], "int32")], {}, {}, 1),
    ("Mod", [X, np.abs(X) + 0.5], {"fmod": 1}, {}, 1),
    ("Xor", [X > 0, X < 0.5], {}, {}, 1),
    ("Trilu", [X], {"upper": 0}, {1: i64(1)}, 1),
    ("Trilu", [X], {}, {}, 1),
    ("Hardmax", [X], {"axis": 1}, {}, 1),
    ("Elu", [X - 0.5], {"alpha": 0.7}, {}, 1),
    ("Selu", [X - 0.5], {}, {}, 1),
    ("Celu", [X - 0.5], {"alpha": 2.0}, {}, 1),
    ("HardSigmoid", [X * 8 - 4], {}, {}, 1),
    ("HardSwish", [X * 8 - 4], {}, {}, 1),
    ("Softplus", [X * 80 - 40], {}, {}, 1),
    ("Softsign", [X - 0.5], {}, {}, 1),
    ("Mish", [X * 8 - 4], {}, {}, 1),
    ("ThresholdedRelu", [X], {"alpha": 0.5}, {}, 1),
    ("PRelu", [X - 0.5, np.array([0.1, 0.2, 0.3, 0.4], "float32")], {}, {}, 1),
    ("Shrink", [X - 0.5], {"bias": 0.1, "lambd": 0.2}, {}, 1),
    ("IsNaN", [np.array([1.0, np.nan, np.inf], "float32")], {}, {}, 1),
    ("IsInf", [np.array([1.0, -np.inf, np.inf], "float32")], {"detect_negative": 0}, {}, 1),
    ("Swish", [X * 8 - 4], {"alpha": 1.5}, {}, 1),
    ("Tan", [X], {}, {}, 1),
    ("Sinh", [X], {}, {}, 1),
    ("Cosh", [X], {}, {}, 1),
    ("CumSum", [X], {"exclusive": 1}, {1: i64(1)}, 1),
    ("CumSum", [X], {"reverse": 1}, {1: i64(0)}, 1),
    ("CumProd", [X + 0.5], {}, {1: i64(1)}, 1),
    ("BitShift", [np.array([1, 2, 200], "uint8"), np.array([1, 7, 2], "uint8")], {"direction": "LEFT"}, {}, 1),
    ("BitShift", [np.array([16, 255, 7], "uint32"), np.array([2, 40, 1], "uint32")], {"direction": "RIGHT"}, {}, 1),
    ("RMSNormalization", [X, np.array([0.5, 1.0, 2.0, 1.5], "float32")], {"epsilon": 1e-3}, {}, 1),
    ("NegativeLogLikelihoodLoss", [rnd(3, 5, 2), np.array([[0, 1], [4, 1], [2, 3]], "int64"),
     np.array([0.5, 1.0, 2.0, 1.5, 0.7], "float32")], {"ignore_index": 1}, {}, 1),
    ("NegativeLogLikelihoodLoss", [rnd(3, 5), np.array([0, 4, 2], "int64")],
     {"reduction": "sum"}, {}, 1),
    ("SoftmaxCrossEntropyLoss", [rnd(3, 5), np.array([0, 4, 2], "int64")],
     {"reduction": "none"}, {}, 2),
    ("SoftmaxCrossEntropyLoss", [rnd(2, 4, 3), np.array([[0, -1, 2], [3, 1, -1]], "int64")],
     {"ignore_index": -1}, {}, 1),
    ("BitwiseAnd", [np.array([12, -7, 255], "int32"), np.array([10, 3, 15], "int32")], {}, {}, 1),
    ("BitwiseOr", [np.array([12, 7, 128], "uint8"), np.array([3, 8, 1], "uint8")], {}, {}, 1),
    ("BitwiseXor", [np.array([12, -7], "int64"), np.array([10, 3], "int64")], {}, {}, 1),
    ("BitwiseNot", [np.array([0, 7, -1], "int16")], {}, {}, 1),
    ("Acos", [X * 2 - 1], {}, {}, 1),
    ("Asin", [X * 2 - 1], {}, {}, 1),
    ("Atan", [X * 8 - 4], {}, {}, 1),
    ("Acosh", [X + 1], {}, {}, 1),
    ("Asinh", [X * 8 - 4], {}, {}, 1),
    ("Atanh", [X * 1.8 - 0.9], {}, {}, 1),
    ("Conv", [rnd(2, 4, 9), rnd(3, 4, 3)], {"pads": [1, 2], "strides": [2]}, {}, 1),
    ("MaxPool", [rnd(2, 4, 9)], {"kernel_shape": [3], "auto_pad": "SAME_UPPER"}, {}, 1),
    ("GlobalMaxPool", [IMG], {}, {}, 1),
    ("GlobalAveragePool", [rnd(2, 4, 9)], {}, {}, 1),
    ("QuantizeLinear", [X, np.array([0.1, 0.2, 0.05], "float32"), np.array([3, -2, 0], "int8")],
     {"axis": 1}, {}, 1),
    ("QuantizeLinear", [rnd(4, 6), np.array([[0.1, 0.2], [0.05, 0.1], [0.3, 0.01], [1, 2]], "float32"),
     np.zeros((4, 2), "uint8")], {"axis": 1, "block_size": 3}, {}, 1),
    ("DequantizeLinear", [np.array([[0, 7, 255], [3, 128, 9]], "uint8"), np.array([0.5, 0.25, 2.0], "float32"),
     np.array([1, 128, 0], "uint8")], {"axis": 1}, {}, 1),
    ("QLinearMatMul", [np.array([[1, 200], [30, 4]], "uint8"), np.float32(0.05), np.uint8(10),
     np.array([[3, 5, 250], [128, 0, 64]], "uint8"), np.array([0.1, 0.2, 0.05], "float32"),
     np.array([1, 2, 3], "uint8"), np.float32(0.5), np.uint8(7)], {}, {}, 1),
    ("MatMulInteger", [np.array([[1, -100], [30, 4]], "int8"), np.array([[3, 5, 127], [-128, 0, 64]], "int8"),
     np.int8(3), np.array([1, -2, 0], "int8")], {}, {}, 1),
    ("ConvInteger", [np.arange(50, dtype="uint8").reshape(1, 2, 5, 5) * 5, np.arange(36, dtype="uint8").reshape(2, 2, 3, 3),
     np.uint8(7), np.uint8(4)], {"pads": [1, 1, 1, 1]}, {}, 1),
    ("ConvInteger", [np.arange(50, dtype="uint8").reshape(1, 2, 5, 5) * 5, np.arange(18, dtype="uint8").reshape(2, 1, 3, 3),
     np.uint8(7)], {"strides": [2, 2], "group": 2}, {}, 1),
    ("QLinearConv", [np.arange(50, dtype="uint8").reshape(1, 2, 5, 5) * 5, np.float32(0.05), np.uint8(10),
     (np.arange(36).reshape(2, 2, 3, 3) * 7 % 255 - 127).astype("int8"), np.float32(0.01), np.int8(0),
     np.float32(0.2), np.uint8(100), np.array([-300, 800], "int32")], {"pads": [1, 1, 1, 1]}, {}, 1),
    ("Tile", [X], {}, {1: i64(2, 1, 3)}, 1),
    ("EyeLike", [rnd(3, 5)], {"k": 1}, {}, 1),
    ("OneHot", [np.array([[0, 3], [-1, 2]], "int64"), None, np.array([2.0, 5.0], "float32")], {"axis": 1},
     {1: np.array(4, "int64")}, 1),
    ("LpNormalization", [X], {"p": 1, "axis": 1}, {}, 1),
    ("LpNormalization", [X], {}, {}, 1),
    ("InstanceNormalization", [IMG, rnd(4), rnd(4)], {"epsilon": 1e-3}, {}, 1),
    ("LRN", [IMG], {"size": 3, "alpha": 0.02, "beta": 0.6, "bias": 1.5}, {}, 1),
    ("LpPool", [IMG], {"kernel_shape": [2, 2], "p": 3, "pads": [1, 0, 0, 1]}, {}, 1),
    ("GatherND", [X, np.array([[1, 2], [0, -1]], "int64")], {}, {}, 1),
    ("GatherND", [X, np.array([[1], [0]], "int64")], {"batch_dims": 1}, {}, 1),
    ("ReverseSequence", [rnd(5, 3, 2), np.array([4, 1, 5], "int64")], {"time_axis": 0, "batch_axis": 1}, {}, 1),
    ("Resize", [IMG], {"mode": "linear"}, {2: np.array([1, 1, 1.5, 0.75], "float32")}, 1),
    ("Resize", [IMG], {"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "pytorch_half_pixel"},
     {2: np.array([1, 1, 0.5, 0.6], "float32")}, 1),
    ("Resize", [IMG], {"mode": "nearest", "axes": [3, 2], "nearest_mode": "ceil",
     "coordinate_transformation_mode": "asymmetric"}, {3: i64(7, 2)}, 1),
    ("Resize", [IMG], {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
     "extrapolation_value": 2.0, "axes": [2, 3]}, {1: np.array([-0.2, 0.1, 0.9, 1.3], "float32"),
     3: i64(5, 3)}, 1),
    ("ScatterElements", [rnd(3, 4), np.array([[2, 0], [-1, 1]], "int64"), rnd(2, 2)], {"axis": 0}, {}, 1),
    ("ScatterElements", [rnd(3, 4), np.array([[1, 1, 3]], "int64"), rnd(1, 3)],
     {"axis": 1, "reduction": "add"}, {}, 1),
    ("ScatterND", [X, np.array([[1, 2], [0, 0]], "int64"), rnd(2, 4)], {}, {}, 1),
    ("ScatterND", [X, np.array([[1], [1]], "int64"), rnd(2, 3, 4)], {"reduction": "mul"}, {}, 1),
    ("TopK", [np.array([[3, 1, 3, 2], [0, 5, 5, 5]], "float32")], {"axis": 1}, {1: i64(3)}, 2),
    ("TopK", [X], {"axis": 0, "largest": 0}, {1: i64(1)}, 2),
    ("Einsum", [rnd(2, 3, 4), rnd(2, 4, 5)], {"equation": "bij,bjk->bik"}, {}, 1),
    ("Einsum", [rnd(4, 3, 3)], {"equation": "...ii->...i"}, {}, 1),
    ("Einsum", [rnd(3, 4)], {"equation": "ij"}, {}, 1),
    ("ConvTranspose", [IMG, rnd(4, 3, 3, 3)], {"strides": [2, 3], "pads": [1, 0, 0, 2],
     "output_padding": [1, 1]}, {}, 1),
    ("ConvTranspose", [IMG, rnd(4, 1, 2, 3), rnd(2)], {"group": 2, "dilations": [2, 1]}, {}, 1),
    ("ConvTranspose", [rnd(2, 4, 5), rnd(4, 3, 3)], {"strides": [2], "auto_pad": "SAME_UPPER"}, {}, 1),
    ("Pow", [np.array([2, 3, -2, 7], "int32"), np.array([3, 2, 3, 0], "int64")], {}, {}, 1),
    ("BitCast", [X], {"to": onnx.TensorProto.INT32}, {}, 1),
    ("GridSample", [IMG, rnd(1, 3, 5, 2) * 2.4 - 1.2], {}, {}, 1),
    ("GridSample", [IMG, rnd(1, 3, 5, 2) * 2.4 - 1.2], {"mode": "cubic", "padding_mode": "reflection"}, {}, 1),
    ("GridSample", [IMG, rnd(1, 3, 5, 2) * 2.4 - 1.2], {"mode": "nearest", "padding_mode": "border",
     "align_corners": 1}, {}, 1),
    # function ops: expanded into the body ONNX defines for them (egraph_ir/frontend/onnx/functions.py)
    ("MeanVarianceNormalization", [IMG], {"axes": [0, 2]}, {}, 1),
    ("Attention", [rnd(2, 4, 3, 8), rnd(2, 2, 5, 8), rnd(2, 2, 5, 8)], {"is_causal": 1}, {}, 1),
    ("Attention", [rnd(2, 3, 16), rnd(2, 5, 16), rnd(2, 5, 8)],
     {"q_num_heads": 2, "kv_num_heads": 2, "scale": 0.3}, {}, 1),
]  # fmt: skip


def test_recurrent_layers_compile_and_match_onnxruntime() -> None:
    import codegen

    for op_type, inputs, attrs, inits, n_out in RECURRENT[:6]:
        model, feeds = single_op_model(op_type, inputs, attrs, n_out, inits)
        expected = run_model(model, feeds)
        exe = codegen.build(from_onnx(model))
        for a, e in zip(exe(**feeds), expected, strict=True):
            assert_allclose(np.asarray(a), e, what=op_type)


def test_batch_first_layout_matches_the_sequence_first_result() -> None:
    # ONNX Runtime refuses layout=1, so its layout=0 result, transposed, is the reference
    kind, inputs, attrs, inits, n_out = RECURRENT[0]
    model, feeds = single_op_model(kind, inputs, attrs, n_out, inits)
    expected = run_model(model, feeds)
    batch_first = [inputs[0].transpose(1, 0, 2), *(i.transpose(1, 0, 2) if i is not None else None
                                                   for i in inputs[1:])]  # fmt: skip
    model, feeds = single_op_model(kind, batch_first, {**attrs, "layout": 1}, n_out, inits)
    got = ir.interpret(from_onnx(model), **feeds)
    assert_allclose(got[0], expected[0].transpose(2, 0, 1, 3))
    for a, e in zip(got[1:], expected[1:], strict=True):
        assert_allclose(a, e.transpose(1, 0, 2))


@pytest.mark.parametrize(
    ("op_type", "inputs", "attrs", "inits", "n_out"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_op_imports_and_matches_onnxruntime(op_type, inputs, attrs, inits, n_out) -> None:
    newer = {"Gelu": 20, "Swish": 24, "RMSNormalization": 23, "CumProd": 26, "Attention": 23,
             "BitCast": 26}  # fmt: skip
    opset = newer.get(op_type, 21)
    opset = 18 if op_type == "Split" and "num_outputs" in attrs else opset
    model, feeds = single_op_model(op_type, inputs, attrs, n_out, inits)
    model.opset_import[0].version = opset
    for out in model.graph.output:  # output types from ONNX's own inference, not ours
        out.type.tensor_type.elem_type = onnx.TensorProto.UNDEFINED
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for out, typed in zip(model.graph.output, inferred.graph.output, strict=True):
        out.type.tensor_type.elem_type = typed.type.tensor_type.elem_type
    expected = run_model(model, feeds)
    mod = from_onnx(model)
    actual = ir.interpret(mod, **feeds)
    actual = list(actual) if isinstance(actual, tuple) else [actual]
    for a, e in zip(actual, expected, strict=True):
        assert_allclose(np.asarray(a), e, what=op_type)


def test_every_converter_has_a_case() -> None:
    covered = {c[0] for c in CASES}
    with_bodies = {"Scan", "If", "Loop"}  # tests of their own below (a body graph per case)
    # ONNX Runtime's QOperator ops: against its kernels in test_onnx_quantized.py
    contrib = {name for name in supported_ops() if name.startswith("com.microsoft.")}
    assert set(supported_ops()) <= covered | {"Constant"} | with_bodies | contrib, (
        set(supported_ops()) - covered
    )


@pytest.mark.parametrize("name", models.NAMES)
def test_reference_models_import_and_agree_with_onnxruntime(name: str, shared_models: Path) -> None:
    path = shared_models / f"{name}.onnx"
    mod = from_onnx(path)
    x = models.example_inputs(name)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert_allclose(ir.interpret(mod, **x), expected)
    assert_allclose(ir.interpret(mod, **x), ir.interpret(models.get(name), **x))


def _graph_model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape, elem=onnx.TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def test_constant_nodes_and_shape_arithmetic_fold_into_a_reshape() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["idx"], value=numpy_helper.from_array(np.int64(0))),
        helper.make_node("Gather", ["s", "idx"], ["n"], axis=0),
        helper.make_node("Constant", [], ["minus1"], value_ints=[-1]),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(i64(0), "zero")]
    model = _graph_model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", None)], inits)
    mod = from_onnx(model)
    assert "reshape(%x, newshape=[2, -1])" in str(mod)
    assert ir.interpret(mod, x=X).shape == (2, 12)


def test_unsupported_ops_are_all_named_in_one_error() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="fine"),
        helper.make_node("Compress", ["a", "a"], ["b"], name="ein1"),
        helper.make_node("Unique", ["b"], ["c"], name="hm"),
        helper.make_node("Compress", ["c", "c"], ["y"], name="ein2"),
    ]
    model = _graph_model(nodes, [_vi("x", [2, 3])], [_vi("y", None)])
    with pytest.raises(ir.FrontendError) as info:
        from_onnx(model)
    message = str(info.value)
    assert "Compress x2 (nodes: ein1, ein2)" in message and "Unique x1 (nodes: hm)" in message
    many = [helper.make_node("Unique", ["x"], [f"h{k}"], name=f"hm{k}") for k in range(50)]
    model = _graph_model(many, [_vi("x", [2, 3])], [_vi("h0", None)])
    with pytest.raises(ir.FrontendError, match=r"Unique x50 \(nodes: hm0, hm1, hm2, ... 47 more\)"):
        from_onnx(model)


def test_shapes_must_name_graph_inputs() -> None:
    model = _graph_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n", 3])],
                         [_vi("y", None)])  # fmt: skip
    assert from_onnx(model, shapes={"x": (4, 3)})["main"].params[0].checked_type.shape == (4, 3)
    with pytest.raises(ir.FrontendError, match=r"shapes= names \['X'\].*inputs: \['x'\]"):
        from_onnx(model, shapes={"X": (4, 3)})


@pytest.mark.parametrize("opset", [7, 9, 11, 12, 22, 25, 28])
def test_old_and_new_opsets_import(opset: int) -> None:
    w = numpy_helper.from_array(rnd(3, 4), "w")
    # MatMul: Gemm before opset 11 requires its C input, which the checker enforces
    nodes = [helper.make_node("MatMul", ["x", "w"], ["g"]), helper.make_node("Relu", ["g"], ["y"])]
    model = _graph_model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 4])], [w], opset=opset)
    x = rnd(2, 3)
    expected = np.maximum(x @ numpy_helper.to_array(w), 0)
    assert_allclose(ir.interpret(from_onnx(model), x=x), expected)


def test_unreadable_opsets_and_changed_operators_are_named() -> None:
    model = _graph_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])],
                         [_vi("y", None)], opset=5)  # fmt: skip
    with pytest.raises(ir.FrontendError, match="opset 5 is not supported; supported: 7 to"):
        from_onnx(model)
    cast = helper.make_node("Cast", ["x"], ["y"], to=1, round_mode="up")
    model = _graph_model([cast], [_vi("x", [2])], [_vi("y", None)], opset=25)
    with pytest.raises(ir.FrontendError, match=r"Cast \(attribute round_mode of opset 25\)"):
        from_onnx(model)


def test_shape_errors_name_the_node() -> None:
    nodes = [helper.make_node("Add", ["x", "y"], ["z"], name="bad_add")]
    model = _graph_model(nodes, [_vi("x", [2, 3]), _vi("y", [4])], [_vi("z", None)])
    with pytest.raises(ir.FrontendError, match=r"node 'bad_add' \(Add\): .*\(2, 3\).*\(4,\)"):
        from_onnx(model)


def test_symbolic_dimensions_import_as_size_variables(tmp_path: Path) -> None:
    """dim_params become size variables: one import runs at any batch in the interpreter;
    so does one build; shape arithmetic over them folds into size expressions."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = _graph_model(nodes, [_vi("x", ["batch", 3])], [_vi("y", None)])
    symbolic = from_onnx(model)
    assert str(symbolic["main"].params[0].type_annotation) == "Tensor[(batch, 3), float32]"
    for batch in (1, 4):
        x = np.linspace(-1, 1, batch * 3, dtype=np.float32).reshape(batch, 3)
        np.testing.assert_array_equal(ir.interpret(symbolic, x), np.maximum(x, 0))
    exe = codegen.build(symbolic)  # one executable for every batch
    for batch in (2, 3):
        x = np.linspace(-1, 1, batch * 3, dtype=np.float32).reshape(batch, 3)
        np.testing.assert_array_equal(exe(x), np.maximum(x, 0))
    shaped = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Reshape", ["x", "s"], ["y"]),
    ]
    model2 = _graph_model(shaped, [_vi("x", ["batch", 3])], [_vi("y", None)])
    reshaped = from_onnx(model2)  # shape arithmetic over sizes folds into the reshape
    assert "newshape=[dim(batch), 3]" in str(reshaped)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(ir.interpret(reshaped, x), x)
    mod = from_onnx(model, shapes={"x": (5, 3)})
    assert mod["main"].params[0].type_annotation == ir.TensorType((5, 3), "float32")
    # a static dimension cannot be changed (ONNX Runtime failed later with a raw error),
    # nor can an input be made too large to hold (a MemoryError deep in the importer)
    with pytest.raises(ir.FrontendError, match=r"dimension 1 is static \(3\)"):
        from_onnx(model, shapes={"x": (5, 4)})
    with pytest.raises(ir.FrontendError, match="not a size an input can have"):
        from_onnx(model, shapes={"x": (10**12, 3)})
    with pytest.raises(ir.FrontendError, match="the input has rank 2"):
        from_onnx(model, shapes={"x": (5, 3, 1)})


def test_missing_and_malformed_files_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ir.FrontendError, match="no such ONNX file"):
        from_onnx(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01 this is not protobuf \xff\xff")
    with pytest.raises(ir.FrontendError, match="not a readable ONNX model"):
        from_onnx(bad)
    old = _graph_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", None)],
                       opset=3)  # fmt: skip
    with pytest.raises(ir.FrontendError, match="opset 3 is not supported"):
        from_onnx(old)


def test_import_types_each_node_a_bounded_number_of_times(monkeypatch) -> None:
    """Import is linear: each new node is typed without revisiting the graph above it
    (it was quadratic: 20,000 nodes did not import in 150 s; now well under a second)."""
    from egraph_ir import infer

    calls = [0]
    original = infer._Inferrer.type_of

    def counting(self, node):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return original(self, node)

    monkeypatch.setattr(infer._Inferrer, "type_of", counting)
    n = 2000
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    mod = from_onnx(_graph_model(nodes, [_vi("t0", [4])], [_vi(f"t{n}", None)]))
    assert mod["main"].body.checked_type.shape == (4,)
    assert calls[0] < 6 * n, calls[0]


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ([helper.make_node("Reshape", ["x"], ["y"])], "not a valid node: .*input size 1"),
        ([helper.make_node("Concat", ["x", "x"], ["y"])], "not a valid node: .*axis"),
        ([helper.make_node("Cast", ["x"], ["y"])], "not a valid node: .*to"),
        ([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])],
         "output 'y' is already defined"),
        ([helper.make_node("Gather", ["x", "i"], ["y"], axis=7)], "Gather"),
        ([helper.make_node("Split", ["x"], ["y", "z"], axis=9)], "Split"),
        ([helper.make_node("Unsqueeze", ["x", "a"], ["y"])], "Unsqueeze"),
    ],
)  # fmt: skip
def test_malformed_models_are_frontend_errors_naming_the_node(nodes, message) -> None:
    inits = [numpy_helper.from_array(np.array([0, 1], "int64"), "i"),
             numpy_helper.from_array(np.array([0, 0], "int64"), "a")]  # fmt: skip
    model = _graph_model(nodes, [_vi("x", [2, 3])], [_vi("y", None)], inits)
    with pytest.raises(ir.FrontendError, match=message):
        from_onnx(model)


def test_a_model_without_outputs_or_with_a_short_initialiser_is_refused() -> None:
    model = _graph_model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [])
    with pytest.raises(ir.FrontendError, match="no outputs"):
        from_onnx(model)
    short = numpy_helper.from_array(np.zeros(4, "float32"), "w")
    short.raw_data = short.raw_data[:5]
    model = _graph_model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [4])],
                         [_vi("y", None)], [short])  # fmt: skip
    with pytest.raises(ir.FrontendError, match="initializer 'w' is malformed"):
        from_onnx(model)


def test_float8_casts_saturate_unless_told_not_to() -> None:
    x = np.array([1000.0, -np.inf, 0.3, np.nan], "float32")
    for saturate, expected in ((1, [448.0, -448.0, 0.3125, np.nan]), (0, [np.nan, np.nan, 0.3125, np.nan])):  # fmt: skip
        node = onnx.helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT8E4M3FN,
                                     saturate=saturate)  # fmt: skip
        graph = onnx.helper.make_graph(
            [node], "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT8E4M3FN, [4])],
        )  # fmt: skip
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
        got = ir.interpret(from_onnx(model), x=x)
        assert str(got.dtype) == "float8_e4m3fn"
        np.testing.assert_array_equal(got.astype("float32"), np.array(expected, "float32"))


def _scan_model(reverse: int, out_axis: int) -> tuple[Any, dict[str, np.ndarray]]:
    """A running sum over the rows of x, with each step's state times 2 stacked."""
    vi = onnx.helper.make_tensor_value_info
    body = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["s_in", "row"], ["s_out"]),
         onnx.helper.make_node("Mul", ["s_out", "two"], ["y"])],
        "body",
        [vi("s_in", onnx.TensorProto.FLOAT, [3]), vi("row", onnx.TensorProto.FLOAT, [3])],
        [vi("s_out", onnx.TensorProto.FLOAT, [3]), vi("y", onnx.TensorProto.FLOAT, [3])],
        [onnx.numpy_helper.from_array(np.array(2.0, "float32"), "two")],
    )  # fmt: skip
    node = onnx.helper.make_node(
        "Scan", ["init", "x"], ["final", "ys"], body=body, num_scan_inputs=1,
        scan_input_axes=[1], scan_input_directions=[reverse], scan_output_axes=[out_axis],
    )  # fmt: skip
    graph = onnx.helper.make_graph(
        [node], "g",
        [vi("init", onnx.TensorProto.FLOAT, [3]), vi("x", onnx.TensorProto.FLOAT, [3, 5])],
        [vi("final", onnx.TensorProto.FLOAT, [3]), vi("ys", onnx.TensorProto.FLOAT, None)],
    )  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    return model, {"init": rnd(3), "x": rnd(3, 5)}


@pytest.mark.parametrize(("reverse", "out_axis"), [(0, 0), (1, 1)])
def test_scan_is_unrolled_and_matches_onnxruntime(reverse: int, out_axis: int) -> None:
    import codegen

    model, feeds = _scan_model(reverse, out_axis)
    expected = run_model(model, feeds)
    mod = from_onnx(model)
    for got in (ir.interpret(mod, **feeds), codegen.build(mod)(**feeds)):
        for a, e in zip(got, expected, strict=True):
            assert_allclose(np.asarray(a), e)


def test_if_becomes_an_ir_if_or_the_taken_branch() -> None:
    vi = onnx.helper.make_tensor_value_info

    def branch(op_type: str) -> Any:
        return onnx.helper.make_graph(
            [onnx.helper.make_node(op_type, ["x", "x"], ["out"])], op_type,
            [], [vi("out", onnx.TensorProto.FLOAT, [2, 3])],
        )  # fmt: skip

    def model(cond_is_input: bool) -> Any:
        nodes = [onnx.helper.make_node("If", ["c"], ["y"], then_branch=branch("Add"),
                                       else_branch=branch("Mul"))]  # fmt: skip
        inputs = [vi("x", onnx.TensorProto.FLOAT, [2, 3])]
        inits = []
        if cond_is_input:
            inputs.append(vi("c", onnx.TensorProto.BOOL, []))
        else:
            inits.append(onnx.numpy_helper.from_array(np.array(False), "c"))
        graph = onnx.helper.make_graph(
            nodes, "g", inputs, [vi("y", onnx.TensorProto.FLOAT, [2, 3])], inits
        )
        return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])

    x = rnd(2, 3)
    folded = from_onnx(model(False))
    assert not any(isinstance(e, ir.If) for e in ir.post_order(folded["main"].body))
    assert_allclose(ir.interpret(folded, x=x), x * x)
    dynamic = from_onnx(model(True))
    for c in (True, False):
        expected = run_model(model(True), {"x": x, "c": np.array(c)})[0]
        assert_allclose(ir.interpret(dynamic, x=x, c=np.array(c)), expected)


def test_a_model_of_other_domains_names_their_ops() -> None:
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", name="b0")
    graph = helper.make_graph([node], "g", [_vi("x", [2])], [_vi("y", [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    with pytest.raises(ir.FrontendError, match=r"no ai.onnx opset; .*ai.onnx.ml.Binarizer x1"):
        from_onnx(model)


def test_loop_with_a_static_trip_count_is_unrolled_and_matches_onnxruntime() -> None:
    """y doubles each step and adds the step number; the steps' y are stacked; the body's
    condition turns false after step 3 of a trip count of 6."""
    vi = onnx.helper.make_tensor_value_info
    body = onnx.helper.make_graph(
        [onnx.helper.make_node("Cast", ["i"], ["i_f"], to=onnx.TensorProto.FLOAT),
         onnx.helper.make_node("Mul", ["y_in", "two"], ["twice"]),
         onnx.helper.make_node("Add", ["twice", "i_f"], ["y_out"]),
         onnx.helper.make_node("Less", ["i", "three"], ["cond_out"]),
         onnx.helper.make_node("Identity", ["y_out"], ["scan"])],
        "body",
        [vi("i", onnx.TensorProto.INT64, []), vi("cond_in", onnx.TensorProto.BOOL, []),
         vi("y_in", onnx.TensorProto.FLOAT, [2])],
        [vi("cond_out", onnx.TensorProto.BOOL, []), vi("y_out", onnx.TensorProto.FLOAT, [2]),
         vi("scan", onnx.TensorProto.FLOAT, [2])],
        [onnx.numpy_helper.from_array(np.array(2.0, "float32"), "two"),
         onnx.numpy_helper.from_array(np.array(3, "int64"), "three")],
    )  # fmt: skip
    node = onnx.helper.make_node("Loop", ["m", "c", "y0"], ["y", "ys"], body=body)
    graph = onnx.helper.make_graph(
        [node], "g", [vi("y0", onnx.TensorProto.FLOAT, [2])],
        [vi("y", onnx.TensorProto.FLOAT, [2]), vi("ys", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(6, "int64"), "m"),
         onnx.numpy_helper.from_array(np.array(True), "c")],
    )  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    feeds = {"y0": np.array([1.0, -0.5], "float32")}
    expected = run_model(model, feeds)
    got = ir.interpret(from_onnx(model), **feeds)
    assert got[1].shape == (4, 2)  # steps 0..3: the condition is false after step 3
    for a, e in zip(got, expected, strict=True):
        assert_allclose(np.asarray(a), e)


def test_a_users_converter_imports_an_op_of_its_own_domain() -> None:
    """The converter API is public: `converter("domain.OpType")` and `Node`."""
    from onnx import TensorProto, helper

    from egraph_ir.frontend import converter
    from egraph_ir.frontend.onnx import CONVERTERS, Node

    node = helper.make_node("ScaledTanh", ["x"], ["y"], domain="com.example", scale=2.0)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    with pytest.raises(ir.CompilerError, match=r"unsupported ONNX ops: com\.example\.ScaledTanh"):
        from_onnx(model)

    @converter("com.example.ScaledTanh")
    def scaled_tanh(n: Node) -> ir.Expr:
        scale = ir.const(np.float32(n.attr("scale")))
        return ir.op.multiply(ir.op.tanh(n.x()), scale)

    try:
        mod = from_onnx(model)
        x = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
        np.testing.assert_allclose(ir.interpret(mod, x), 2 * np.tanh(x), rtol=1e-6)
    finally:
        del CONVERTERS["com.example.ScaledTanh"]
