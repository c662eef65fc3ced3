"""Every op's numpy reference against an independent computation.

ONNX Runtime is the reference for ops ONNX has; explicit loops or formulas for the rest. Each
case also checks that infer_type predicts the shape and dtype the reference produces.
Float32 results agree to rtol 1e-5 (ORT and numpy may use different but correctly rounded
kernels; accumulations over up to ~100 terms stay within that), reductions and contractions
to 1e-4.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import egraph_ir as ir
from egraph_ir import op
from egraph_ir.types import TensorType, TupleType, tensor_types

from ..hosts import ORT_INT8_EXACT
from .onnx_single_op import run_model, run_onnx, single_op_model

pytestmark = pytest.mark.onnx
QNN_OPS = (
    "quantize", "dequantize", "requantize", "qnn_conv2d", "qnn_dense", "qnn_matmul", "qnn_add",
    "qnn_sigmoid", "qnn_softmax",
)  # fmt: skip
rng = np.random.default_rng(1234)


def rnd(*shape: int, dtype: str = "float32", low: float = -3, high: float = 3) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith(("int", "uint")):
        return rng.integers(int(low), int(high) + 1, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


def ir_eval(name: str, inputs: list[np.ndarray], **attrs: Any) -> Any:
    """Evaluate one op through the IR (build, infer_type, interpret) and check the type."""
    params = [ir.var(f"a{i}", shape=a.shape, dtype=str(a.dtype)) for i, a in enumerate(inputs)]
    call = (
        op.call(name, *params, **attrs)
        if not op.get(name).variadic
        else op.call(name, params, **attrs)
    )
    fn = ir.Function(params, call)
    mod = ir.infer_type(ir.IRModule.from_expr(fn))
    out = ir.interpret(mod, *inputs)
    ty = mod["main"].body.checked_type
    leaves = out if isinstance(out, tuple) else (out,)
    for arr, t in zip(leaves, tensor_types(ty), strict=True):
        assert isinstance(t, TensorType)
        assert arr.shape == t.shape and str(arr.dtype) == t.dtype, (arr.shape, arr.dtype, t)
    assert isinstance(ty, TupleType) == isinstance(out, tuple)
    return out


def close(actual: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


# ---------------------------------------------------------------- elementwise, against ORT
UNARY_ONNX = {
    "negative": "Neg",
    "abs": "Abs",
    "exp": "Exp",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
    "relu": "Relu",
    "erf": "Erf",
    "sin": "Sin",
    "cos": "Cos",
    "floor": "Floor",
    "ceil": "Ceil",
    "round": "Round",
    "sign": "Sign",
}
POSITIVE_ONNX = {"log": "Log", "sqrt": "Sqrt"}
SHAPES = [(), (7,), (3, 5), (2, 3, 4, 5)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY_ONNX | POSITIVE_ONNX))
def test_unary_against_onnxruntime(name: str, dtype: str, shape: tuple[int, ...]) -> None:
    if dtype == "float64" and name in ("erf", "round", "sign", "sin", "cos"):
        pytest.skip("onnxruntime has no float64 CPU kernel for this op")
    x = rnd(*shape, dtype=dtype, low=0.01 if name in POSITIVE_ONNX else -3)
    if name == "round":
        x = np.concatenate([x.reshape(-1), np.asarray([0.5, 1.5, -2.5], dtype)])
    onnx_type = (UNARY_ONNX | POSITIVE_ONNX)[name]
    close(ir_eval(name, [x]), run_onnx(onnx_type, [x])[0])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("name", ["negative", "abs", "relu", "sign"])
def test_integer_unary_against_onnxruntime(name: str, dtype: str) -> None:
    x = rnd(4, 5, dtype=dtype, low=-9, high=9)
    if name == "relu":  # onnxruntime has no integer Relu kernel
        close(ir_eval(name, [x]), np.where(x > 0, x, 0).astype(dtype))
        return
    close(ir_eval(name, [x]), run_onnx(UNARY_ONNX[name], [x])[0])


def test_activation_attributes_against_onnxruntime() -> None:
    x = rnd(4, 6)
    close(ir_eval("leaky_relu", [x], alpha=0.2), run_onnx("LeakyRelu", [x], {"alpha": 0.2})[0])
    for approx in ("none", "tanh"):
        close(
            ir_eval("gelu", [x], approximate=approx),
            run_onnx("Gelu", [x], {"approximate": approx})[0],
        )
    close(
        ir_eval("clip", [x], a_min=-1.0, a_max=0.5),
        run_onnx("Clip", [x], initializers={1: np.float32(-1), 2: np.float32(0.5)})[0],
    )
    close(
        ir_eval("rsqrt", [np.abs(x) + 0.1]),
        1 / np.sqrt(np.abs(x).astype(np.float64) + 0.1).astype(np.float32),
    )
    close(ir_eval("logical_not", [x > 0]), run_onnx("Not", [x > 0])[0])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
def test_cast_against_onnxruntime(dtype: str) -> None:
    x = rnd(3, 4, low=-5, high=5)
    to = int(__import__("onnx").helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    close(ir_eval("cast", [x], dtype=dtype), run_onnx("Cast", [x], {"to": to}, out_dtype=dtype)[0])


BINARY_ONNX = {
    "add": "Add",
    "subtract": "Sub",
    "multiply": "Mul",
    "divide": "Div",
    "maximum": "Max",
    "minimum": "Min",
    "power": "Pow",
}
COMPARE_ONNX = {
    "equal": "Equal",
    "less": "Less",
    "less_equal": "LessOrEqual",
    "greater": "Greater",
    "greater_equal": "GreaterOrEqual",
}
BROADCAST_PAIRS = [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (4,)),
    ((1, 4), (3, 1)),
    ((), (2, 2)),
    ((5, 1, 3), (1, 2, 1)),
]


@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("name", sorted(BINARY_ONNX))
def test_binary_against_onnxruntime(name: str, dtype: str, shapes) -> None:
    if name == "power" and not dtype.startswith("float"):
        pytest.skip("power is defined on floats")
    low = 0.1 if name == "power" else -9
    a, b = (
        rnd(*shapes[0], dtype=dtype, low=low, high=9),
        rnd(*shapes[1], dtype=dtype, low=low, high=9),
    )
    if name == "divide":
        b = np.where(b == 0, 3, b).astype(dtype)
    close(ir_eval(name, [a, b]), run_onnx(BINARY_ONNX[name], [a, b])[0], rtol=2e-5)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("name", sorted(COMPARE_ONNX))
def test_comparisons_against_onnxruntime(name: str, dtype: str) -> None:
    a, b = rnd(3, 4, dtype=dtype, low=-2, high=2), rnd(4, dtype=dtype, low=-2, high=2)
    close(ir_eval(name, [a, b]), run_onnx(COMPARE_ONNX[name], [a, b], out_dtype="bool")[0])
    close(ir_eval("not_equal", [a, b]), ~run_onnx("Equal", [a, b], out_dtype="bool")[0])


def test_logical_and_where_against_onnxruntime() -> None:
    p, q = rnd(3, 4, dtype="bool"), rnd(4, dtype="bool")
    close(ir_eval("logical_and", [p, q]), run_onnx("And", [p, q])[0])
    close(ir_eval("logical_or", [p, q]), run_onnx("Or", [p, q])[0])
    x, y = rnd(2, 1, 4), rnd(3, 1)
    close(ir_eval("where", [q, x, y]), run_onnx("Where", [q, x, y], out_dtype="float32")[0])


def test_integer_division_truncates_toward_zero() -> None:
    a = np.array([7, -7, 7, -7, 5], dtype="int32")
    b = np.array([2, 2, -2, -2, 0], dtype="int32")
    close(ir_eval("divide", [a, b]), np.array([3, -3, -3, 3, 0], dtype="int32"))


# ---------------------------------------------------------------- shape ops, against ORT
def i64(*v: int) -> np.ndarray:
    return np.asarray(v, dtype=np.int64)


def test_reshape_transpose_expand_squeeze_against_onnxruntime() -> None:
    x = rnd(2, 3, 4)
    close(
        ir_eval("reshape", [x], newshape=(4, -1)),
        run_onnx("Reshape", [x], initializers={1: i64(4, -1)})[0],
    )
    close(
        ir_eval("transpose", [x], axes=(2, 0, 1)),
        run_onnx("Transpose", [x], {"perm": [2, 0, 1]})[0],
    )
    close(ir_eval("transpose", [x]), run_onnx("Transpose", [x])[0])
    close(
        ir_eval("expand_dims", [x], axis=1, num_newaxis=2),
        run_onnx("Unsqueeze", [x], initializers={1: i64(1, 2)})[0],
    )
    close(
        ir_eval("expand_dims", [x], axis=-1),
        run_onnx("Unsqueeze", [x], initializers={1: i64(-1)})[0],
    )
    y = rnd(1, 3, 1, 2)
    close(ir_eval("squeeze", [y]), run_onnx("Squeeze", [y])[0])
    close(
        ir_eval("squeeze", [y], axis=(-2,)), run_onnx("Squeeze", [y], initializers={1: i64(-2)})[0]
    )
    close(ir_eval("flatten", [x], axis=2), run_onnx("Flatten", [x], {"axis": 2})[0])
    close(ir_eval("flatten", [x], axis=0), run_onnx("Flatten", [x], {"axis": 0})[0])


def test_broadcast_to_against_onnxruntime() -> None:
    x = rnd(3, 1)
    close(
        ir_eval("broadcast_to", [x], shape=(2, 3, 4)),
        run_onnx("Expand", [x], initializers={1: i64(2, 3, 4)})[0],
    )


def test_concatenate_and_split_against_onnxruntime() -> None:
    a, b, c = rnd(2, 3), rnd(2, 5), rnd(2, 1)
    close(ir_eval("concatenate", [a, b, c], axis=1), run_onnx("Concat", [a, b, c], {"axis": 1})[0])
    x = rnd(6, 4)
    ours = ir_eval("split", [x], indices_or_sections=3, axis=0)
    theirs = run_onnx("Split", [x], {"axis": 0, "num_outputs": 3}, n_outputs=3)
    for o, t in zip(ours, theirs, strict=True):
        close(o, t)
    ours = ir_eval("split", [x], indices_or_sections=(1, 3), axis=1)
    theirs = run_onnx("Split", [x], {"axis": 1}, n_outputs=3, initializers={1: i64(1, 2, 1)})
    for o, t in zip(ours, theirs, strict=True):
        close(o, t)


@pytest.mark.parametrize(
    "spec",
    [
        ((1,), (4,), (1,), (0,)),
        ((-3,), (100,), (2,), (1,)),
        ((4,), (-100,), (-1,), (0,)),
        ((0, 1), (2, -1), (1, 2), (0, 2)),
        ((-1,), (-5,), (-2,), (2,)),
    ],
    ids=str,
)
def test_strided_slice_against_onnxruntime(spec) -> None:
    begin, end, strides, axes = spec
    x = rnd(5, 4, 6)
    close(
        ir_eval("strided_slice", [x], begin=begin, end=end, strides=strides, axes=axes),
        run_onnx(
            "Slice",
            [x],
            initializers={1: i64(*begin), 2: i64(*end), 3: i64(*axes), 4: i64(*strides)},
        )[0],
    )


def test_take_against_onnxruntime_and_modes() -> None:
    x = rnd(4, 5)
    idx = np.array([[0, 3], [-1, 2]], dtype=np.int64)
    close(
        ir_eval("take", [x, idx], axis=1, mode="fast"), run_onnx("Gather", [x, idx], {"axis": 1})[0]
    )
    wild = np.array([-7, 9, 2], dtype=np.int32)
    close(ir_eval("take", [x, wild], axis=0), x[[0, 3, 2]])
    close(ir_eval("take", [x, wild], axis=0, mode="wrap"), x[[-7 % 4, 9 % 4, 2]])
    close(ir_eval("take", [x, wild]), x.reshape(-1)[[0, 9, 2]])


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_mod_and_fmod_against_onnxruntime(dtype: str) -> None:
    a = np.array([[-7, 7, -6, 5], [3, -3, 0, 9]], dtype=dtype)
    b = np.array([2, -3, 4, -5], dtype=dtype)
    close(ir_eval("fmod", [a, b]), run_onnx("Mod", [a, b], {"fmod": 1})[0])
    if dtype.startswith("int"):
        close(ir_eval("mod", [a, b]), run_onnx("Mod", [a, b], {"fmod": 0})[0])
        zero = np.zeros_like(b)
        close(ir_eval("mod", [a, zero]), np.zeros_like(a))  # our definition: x mod 0 = 0
    else:
        close(ir_eval("mod", [a, b]), np.mod(a, b))


def test_gather_elements_against_onnxruntime_and_modes() -> None:
    x = rnd(3, 4)
    idx = np.array([[0, 3, -1], [2, -4, 1]], dtype=np.int64)
    theirs = run_onnx("GatherElements", [x, idx], {"axis": 1})[0]
    close(ir_eval("gather_elements", [x, idx], axis=1, mode="fast"), theirs)
    wild = np.array([[5, -9]], dtype=np.int32)
    close(ir_eval("gather_elements", [x, wild], axis=0), x[[2, 0], [0, 1]][None])
    close(ir_eval("gather_elements", [x, wild], axis=0, mode="wrap"), x[[2, 0], [0, 1]][None])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_against_onnxruntime(mode: str) -> None:
    x = rnd(3, 4)
    ours = ir_eval("pad", [x], pad_width=((1, 2), (0, 3)), pad_value=1.5, pad_mode=mode)
    theirs = run_onnx(
        "Pad",
        [x, None, None],
        {"mode": mode},
        initializers={1: i64(1, 0, 2, 3), 2: np.float32(1.5)},
    )[0]
    close(ours, theirs)


# ---------------------------------------------------------------- reductions
REDUCE_ONNX = {
    "sum": "ReduceSum",
    "mean": "ReduceMean",
    "max": "ReduceMax",
    "min": "ReduceMin",
    "prod": "ReduceProd",
}


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, (1,), (0, 2), (-1,)], ids=str)
@pytest.mark.parametrize("name", sorted(REDUCE_ONNX))
def test_reductions_against_onnxruntime(name: str, axis, keepdims: bool) -> None:
    x = rnd(3, 4, 5, low=0.5, high=1.5)
    inits = {} if axis is None else {1: i64(*axis)}
    close(
        ir_eval(name, [x], axis=axis, keepdims=keepdims),
        run_onnx(REDUCE_ONNX[name], [x], {"keepdims": int(keepdims)}, initializers=inits)[0],
        rtol=1e-4,
    )


def test_integer_sum_and_argmax() -> None:
    x = rnd(3, 4, dtype="int64", low=-5, high=5)
    close(
        ir_eval("sum", [x], axis=(0,)),
        run_onnx("ReduceSum", [x], {"keepdims": 0}, initializers={1: i64(0)})[0],
    )
    y = rnd(3, 4, 5)
    for axis, keep in [(1, False), (-1, True), (0, True)]:
        close(
            ir_eval("argmax", [y], axis=axis, keepdims=keep),
            run_onnx("ArgMax", [y], {"axis": axis, "keepdims": int(keep)}, out_dtype="int64")[0],
        )
    close(ir_eval("argmax", [y]), np.asarray(np.argmax(y), dtype=np.int64))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_against_onnxruntime(axis: int) -> None:
    x = rnd(3, 4, 5, low=-20, high=20)
    close(ir_eval("softmax", [x], axis=axis), run_onnx("Softmax", [x], {"axis": axis})[0])
    close(
        ir_eval("log_softmax", [x], axis=axis),
        run_onnx("LogSoftmax", [x], {"axis": axis})[0],
        atol=1e-5,
    )


# ---------------------------------------------------------------- nn
def test_dense_matmul_batch_matmul() -> None:
    x, w = rnd(4, 6), rnd(5, 6)
    close(ir_eval("dense", [x, w]), run_onnx("Gemm", [x, w], {"transB": 1})[0], rtol=1e-4)
    for sa, sb in [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (4, 3)),
        ((2, 3, 4), (4,)),
    ]:
        a, b = rnd(*sa), rnd(*sb)
        close(ir_eval("matmul", [a, b]), run_onnx("MatMul", [a, b])[0], rtol=1e-4, atol=1e-5)
    a, b = rnd(2, 3, 4), rnd(2, 5, 4)
    expected = np.stack(
        [
            [
                [sum(float(a[n, i, k]) * float(b[n, j, k]) for k in range(4)) for j in range(5)]
                for i in range(3)
            ]
            for n in range(2)
        ]
    ).astype(np.float32)
    close(ir_eval("batch_matmul", [a, b]), expected, rtol=1e-4, atol=1e-5)
    c = rnd(1, 4, 5)
    close(ir_eval("batch_matmul", [a, c], transpose_b=False), np.matmul(a, c), rtol=1e-4, atol=1e-5)
    close(
        ir_eval("batch_matmul", [np.swapaxes(a, 1, 2), c], transpose_a=True, transpose_b=False),
        np.matmul(a, c),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "cfg",
    [
        dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1),
        dict(strides=(2, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1),
        dict(strides=(1, 2), padding=(0, 1, 2, 1), dilation=(2, 1), groups=2),
        dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=4),
    ],
    ids=str,
)
def test_conv2d_against_onnxruntime(cfg) -> None:
    x = rnd(2, 4, 7, 6)
    w = rnd(8, 4 // cfg["groups"], 3, 2)
    ours = ir_eval("conv2d", [x, w], **cfg)
    theirs = run_onnx(
        "Conv",
        [x, w],
        {
            "strides": list(cfg["strides"]),
            "pads": list(cfg["padding"]),
            "dilations": list(cfg["dilation"]),
            "group": cfg["groups"],
        },
    )[0]
    close(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "cfg",
    [
        dict(pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False),
        dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=False),
        dict(pool_size=(3, 2), strides=(2, 2), padding=(1, 0, 1, 1), ceil_mode=True),
        dict(pool_size=(2, 2), strides=(3, 3), padding=(0, 0, 0, 0), ceil_mode=True),
    ],
    ids=str,
)
def test_pooling_against_onnxruntime(cfg) -> None:
    x = rnd(1, 3, 7, 8)
    onnx_attrs = {
        "kernel_shape": list(cfg["pool_size"]),
        "strides": list(cfg["strides"]),
        "pads": list(cfg["padding"]),
        "ceil_mode": int(cfg["ceil_mode"]),
    }
    close(ir_eval("max_pool2d", [x], **cfg), run_onnx("MaxPool", [x], onnx_attrs)[0])
    for include in (False, True):
        close(
            ir_eval("avg_pool2d", [x], count_include_pad=include, **cfg),
            run_onnx("AveragePool", [x], {**onnx_attrs, "count_include_pad": int(include)})[0],
        )
    close(ir_eval("global_avg_pool2d", [x]), run_onnx("GlobalAveragePool", [x])[0])


def test_normalisations_against_onnxruntime() -> None:
    x = rnd(2, 4, 3, 5)
    g, b, m, v = rnd(4), rnd(4), rnd(4), rnd(4, low=0.5, high=2)
    out, mean, var = ir_eval("batch_norm", [x, g, b, m, v], epsilon=1e-3)
    close(out, run_onnx("BatchNormalization", [x, g, b, m, v], {"epsilon": 1e-3})[0], atol=1e-5)
    close(mean, m)
    close(var, v)
    gl, bl = rnd(5), rnd(5)
    close(
        ir_eval("layer_norm", [x, gl, bl]),
        run_onnx("LayerNormalization", [x, gl, bl], {"axis": -1})[0],
        rtol=1e-4,
        atol=1e-5,
    )
    close(
        ir_eval("instance_norm", [x, g, b], epsilon=1e-5),
        run_onnx("InstanceNormalization", [x, g, b])[0],
        rtol=1e-4,
        atol=1e-5,
    )
    close(
        ir_eval("group_norm", [x, g, b], num_groups=2),
        run_onnx("GroupNormalization", [x, g, b], {"num_groups": 2})[0],
        rtol=1e-4,
        atol=1e-5,
    )


def test_layer_norm_on_a_middle_axis_matches_a_formula() -> None:
    x, g, b = rnd(2, 3, 4), rnd(3), rnd(3)
    mu = x.astype(np.float64).mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    expected = (x - mu) / np.sqrt(var + 1e-5) * g[None, :, None] + b[None, :, None]
    close(
        ir_eval("layer_norm", [x, g, b], axis=1), expected.astype(np.float32), rtol=1e-4, atol=1e-5
    )


def test_l2_normalize_bias_add_dropout_match_loops() -> None:
    x = rnd(2, 3, 4)
    out = ir_eval("l2_normalize", [x], eps=1e-6, axis=(1,))
    expected = np.empty_like(x)
    for i in range(2):
        for k in range(4):
            norm = math.sqrt(max(sum(float(x[i, j, k]) ** 2 for j in range(3)), 1e-6))
            for j in range(3):
                expected[i, j, k] = x[i, j, k] / norm
    close(out, expected)
    bias = rnd(3)
    expected = x.copy()
    for j in range(3):
        expected[:, j, :] += bias[j]
    close(ir_eval("bias_add", [x, bias]), expected)
    data, mask = ir_eval("dropout", [x], rate=0.3)
    close(data, x)
    close(mask, np.ones_like(x))


def test_creation_ops() -> None:
    x = rnd(2, 3, dtype="int32")
    close(ir_eval("zeros_like", [x]), np.zeros((2, 3), "int32"))
    close(ir_eval("ones_like", [x]), np.ones((2, 3), "int32"))
    close(ir_eval("full_like", [x], fill_value=7.0), np.full((2, 3), 7, "int32"))
    for name, expected in [
        ("zeros", np.zeros((2, 2), "float64")),
        ("ones", np.ones((2, 2), "float64")),
    ]:
        mod = ir.IRModule.from_expr(ir.Function([], op.call(name, shape=(2, 2), dtype="float64")))
        close(ir.interpret(ir.infer_type(mod)), expected)
    mod = ir.IRModule.from_expr(
        ir.Function([], op.full(fill_value=2.5, shape=(3,), dtype="float32"))
    )
    close(ir.interpret(ir.infer_type(mod)), np.full((3,), 2.5, "float32"))


@pytest.mark.parametrize("start, stop, step", [(0, 5, 1), (2, 9, 3), (7, 1, -2), (4, 4, 1)])
def test_arange_and_dim_values_against_numpy(start: int, stop: int, step: int) -> None:
    """Static bounds give numpy's arange; bounds that are sizes take their values from
    the inputs when the program runs, and so do dim_values."""
    close(ir_eval("arange", [], start=start, stop=stop, step=step), np.arange(start, stop, step))
    past = ir.size_var("past")
    x = ir.var("x", shape=(1, past), dtype="float32")
    positions = op.arange(start=past, stop=past + 1, step=1, dtype="int64")
    sizes = op.dim_values(values=(past, past + step), shape=(2,), dtype="int64")
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], ir.Tuple([positions, sizes]))))
    assert str(mod["main"].body.checked_type.fields[0]) == "Tensor[(1,), int64]"
    for n in (0, 6):
        got = ir.interpret(mod, np.zeros((1, n), np.float32))
        np.testing.assert_array_equal(got[0], [n])
        np.testing.assert_array_equal(got[1], [n, n + step])


@pytest.mark.parametrize(
    "name, ufunc, identity", [("cumsum", np.add, 0), ("cumprod", np.multiply, 1)]
)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_ops(name, ufunc, identity, exclusive: bool, reverse: bool) -> None:
    value = np.arange(1, 13, dtype="int64").reshape(3, 4)
    x = ir.var("x", shape=(3, 4), dtype="int64")
    fn = ir.Function([x], op.call(name, x, axis=1, exclusive=exclusive, reverse=reverse))
    rows = value[:, ::-1] if reverse else value
    want = ufunc.accumulate(rows, axis=1)
    if exclusive:
        want = np.concatenate([np.full((3, 1), identity), want[:, :-1]], axis=1)
    want = want[:, ::-1] if reverse else want
    assert (ir.interpret(fn, value) == want).all()


def test_shifts_by_the_width_or_more() -> None:
    x = ir.var("x", shape=(3,), dtype="int8")
    y = ir.var("y", shape=(3,), dtype="int8")
    xs, ys = np.array([-8, 4, 3], "int8"), np.array([8, 9, 1], "int8")
    right = ir.interpret(ir.Function([x, y], op.right_shift(x, y)), xs, ys)
    left = ir.interpret(ir.Function([x, y], op.left_shift(x, y)), xs, ys)
    assert right.tolist() == [-1, 0, 1] and left.tolist() == [0, 0, 6]


ANNOTATION_ATTRS = {
    "compiler_begin": {"compiler": "t"},
    "compiler_end": {"compiler": "t"},
    "on_device": {"virtual_device": ir.VirtualDevice("cpu", 1)},
    "device_copy": {"src_virtual_device": "cpu:0", "dst_virtual_device": "cpu:1"},
}


@pytest.mark.parametrize("name", list(ANNOTATION_ATTRS))
def test_annotations_pass_values_through_tuples_included(name: str) -> None:
    x = ir.var("x", shape=(2, 3), dtype="int32")
    value = np.arange(6, dtype="int32").reshape(2, 3)
    marked = op.call(name, x, **ANNOTATION_ATTRS[name])
    assert (ir.interpret(ir.Function([x], marked), value) == value).all()
    pair = op.call(name, ir.Tuple((x, op.negative(x))), **ANNOTATION_ATTRS[name])
    fn = ir.Function([x], ir.TupleGetItem(pair, 1))
    assert (ir.interpret(fn, value) == -value).all()


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatters_against_onnxruntime(reduction: str) -> None:
    data, updates = rnd(4, 5), rnd(2, 5)
    index = np.array([[3, 0, 1, 1, 2], [1, 2, 0, 3, -1]], "int64")
    if reduction == "none":  # duplicates are unordered without a reduction
        index = np.array([[3, 0, 1, 1, 2], [1, 2, 0, 3, 0]], "int64")
    close(
        ir_eval("scatter_elements", [data, index, updates], axis=0, reduction=reduction),
        run_onnx("ScatterElements", [data, index, updates], {"axis": 0, "reduction": reduction})[0],
    )
    nd_index = np.array([[2], [0]], "int64")
    close(
        ir_eval("scatter_nd", [data, nd_index, updates], reduction=reduction),
        run_onnx("ScatterND", [data, nd_index, updates], {"reduction": reduction})[0],
    )


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_topk_against_onnxruntime(largest: bool, dtype: str) -> None:
    x = rnd(3, 6, dtype=dtype, low=0, high=4)  # few values: ties everywhere
    got = ir_eval("topk", [x], k=4, axis=1, largest=largest, sorted=True)
    model, feeds = single_op_model("TopK", [x], {"axis": 1, "largest": int(largest)}, 2,
                                   {1: np.array([4])})  # fmt: skip
    model.graph.output[1].type.tensor_type.elem_type = __import__("onnx").TensorProto.INT64
    want = run_model(model, feeds)
    close(got[0], want[0])
    close(got[1], want[1])


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [("ij,jk->ik", [(3, 4), (4, 2)]), ("bij->bji", [(2, 3, 4)]), ("...ii->...i", [(2, 3, 3)]),
     ("i,i", [(5,), (5,)]), ("ij", [(3, 4)])],
)  # fmt: skip
def test_einsum_against_onnxruntime(equation: str, shapes: list) -> None:
    xs = [rnd(*shape) for shape in shapes]
    close(
        ir_eval("einsum", xs, equation=equation), run_onnx("Einsum", xs, {"equation": equation})[0]
    )


def test_bitcast_keeps_the_bits_and_the_width() -> None:
    x = np.array([[1.5, -0.0], [np.inf, 3e-39]], "float32")
    close(ir_eval("bitcast", [x], dtype="int32"), x.view(np.int32))
    close(ir_eval("bitcast", [x.view(np.uint32)], dtype="float32"), x)
    with pytest.raises(ir.TypeInferenceError, match="bitcast keeps the width"):
        ir_eval("bitcast", [x], dtype="int64")


INVERSE_TRIG_ONNX = {
    "acos": ("Acos", -0.99, 0.99),
    "asin": ("Asin", -0.99, 0.99),
    "atan": ("Atan", -9, 9),
    "acosh": ("Acosh", 1.01, 9),
    "asinh": ("Asinh", -9, 9),
    "atanh": ("Atanh", -0.99, 0.99),
}


@pytest.mark.parametrize("name", sorted(INVERSE_TRIG_ONNX))
def test_inverse_trigonometry_against_onnxruntime(name: str) -> None:
    onnx_type, low, high = INVERSE_TRIG_ONNX[name]
    x = rnd(3, 5, low=low, high=high)
    close(ir_eval(name, [x]), run_onnx(onnx_type, [x])[0])


BITWISE_ONNX = {"bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr", "bitwise_xor": "BitwiseXor"}


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint64"])
@pytest.mark.parametrize("name", sorted(BITWISE_ONNX))
def test_bitwise_against_onnxruntime(name: str, dtype: str) -> None:
    low = 0 if dtype.startswith("u") else -100
    a, b = rnd(3, 4, dtype=dtype, low=low, high=100), rnd(4, dtype=dtype, low=low, high=100)
    close(ir_eval(name, [a, b]), run_onnx(BITWISE_ONNX[name], [a, b])[0])
    close(ir_eval("bitwise_not", [a]), run_onnx("BitwiseNot", [a])[0])


COVERED = (
    {"conv2d_mlas", "dense_mlas", "matmul_mlas"}
    | set(UNARY_ONNX)
    | set(POSITIVE_ONNX)
    | set(BINARY_ONNX)
    | set(COMPARE_ONNX)
    | set(REDUCE_ONNX)
    | {
        "leaky_relu",
        "gelu",
        "clip",
        "rsqrt",
        "logical_not",
        "cast",
        "not_equal",
        "logical_and",
        "logical_or",
        "where",
        "reshape",
        "transpose",
        "expand_dims",
        "squeeze",
        "broadcast_to",
        "flatten",
        "concatenate",
        "split",
        "strided_slice",
        "take",
        "gather_elements",
        "mod",
        "fmod",
        "pad",
        "argmax",
        "softmax",
        "log_softmax",
        "dense",
        "matmul",
        "batch_matmul",
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "global_avg_pool2d",
        "batch_norm",
        "layer_norm",
        "instance_norm",
        "group_norm",
        "l2_normalize",
        "bias_add",
        "dropout",
        "zeros",
        "ones",
        "full",
        "zeros_like",
        "ones_like",
        "full_like",
        "arange",
        "dim_values",
        *ANNOTATION_ATTRS,
        "cumsum",
        "cumprod",
        "left_shift",
        "right_shift",
        *INVERSE_TRIG_ONNX,
        *BITWISE_ONNX,
        "bitwise_not",
        "bitcast",
        "scatter_elements",
        "scatter_nd",
        "topk",
        "einsum",
        *QNN_OPS,
        "layout_transform",  # test_layout_ops.py: by hand and through ONNX Runtime
        "conv2d_nchwc",
        "qnn_conv2d_nchwc",  # test_layout_ops.py too
        "conv2d_winograd",  # test_layout_ops.py too
        "im2col",  # test_layout_ops.py: against a loop over the windows, and compiled
    }
)


# ---------------------------------------------------------------- quantised, against ORT
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_quantize_and_dequantize_against_onnxruntime(dtype: str) -> None:
    """Bit for bit: round half to even, saturation (NaN the type's least value, as ORT's
    x86 kernels give it), (q - zero point) * scale."""
    edges = np.array([0.5, 1.5, -2.5, 1e9, np.nan, -np.nan, np.inf, -np.inf], "float32")
    x = np.concatenate([rnd(40, low=-60, high=60), edges])
    scale, zero = np.array(0.37, "float32"), np.array(7 if dtype == "uint8" else -5, dtype)
    q = ir_eval("quantize", [x, scale, zero])
    want = run_onnx("QuantizeLinear", [x], initializers={1: scale, 2: zero}, out_dtype=dtype)
    np.testing.assert_array_equal(q, want[0])
    back = run_onnx("DequantizeLinear", [q], initializers={1: scale, 2: zero}, out_dtype="float32")
    np.testing.assert_array_equal(ir_eval("dequantize", [q, scale, zero]), back[0])


def test_integer_products_against_onnxruntime() -> None:
    """qnn_conv2d is ConvInteger, qnn_matmul MatMulInteger (qnn_dense on the transposed weight),
    requantize over a biased qnn_conv2d is QLinearConv: exact integers everywhere."""
    # without VNNI ONNX Runtime adds byte products in saturating 16-bit pairs
    # (tests/hosts.py): 7-bit weights keep every pair exact there
    bound = 127 if ORT_INT8_EXACT else 63
    x, w = (
        rnd(1, 4, 6, 6, dtype="uint8", low=0, high=255),
        rnd(3, 4, 3, 3, dtype="int8", low=-bound, high=bound),
    )
    zx, zw = np.array(131, "uint8"), np.array(0, "int8")
    acc = ir_eval("qnn_conv2d", [x, w, zx, zw], padding=(1, 1, 1, 1))
    conv = run_onnx(
        "ConvInteger",
        [x],
        {"pads": [1, 1, 1, 1]},
        initializers={1: w, 2: zx, 3: zw},
        out_dtype="int32",
    )
    np.testing.assert_array_equal(acc, conv[0])
    a, b = (
        rnd(5, 7, dtype="uint8", low=0, high=255),
        rnd(4, 7, dtype="int8", low=-bound, high=bound),
    )
    product = run_onnx(
        "MatMulInteger", [a], initializers={1: b.T.copy(), 2: zx, 3: zw}, out_dtype="int32"
    )
    np.testing.assert_array_equal(ir_eval("qnn_dense", [a, b, zx, zw]), product[0])
    np.testing.assert_array_equal(ir_eval("qnn_matmul", [a, b.T.copy(), zx, zw]), product[0])
    bias, sx, sw, sy, zy = rnd(3, dtype="int32", low=-900, high=900), 0.02, 0.003, 0.05, 9
    scales = {i: np.array(v, "float32") for i, v in ((1, sx), (4, sw), (6, sy))}
    ort_out = run_onnx(
        "QLinearConv", [x], {"pads": [1, 1, 1, 1]},
        initializers={**scales, 2: zx, 3: w, 5: zw, 7: np.array(zy, "uint8"), 8: bias},
        out_dtype="uint8",
    )[0]  # fmt: skip
    multiplier = np.float32(np.float32(sx) * np.float32(sw)) / np.float32(sy)
    biased = (acc + bias.reshape(1, 3, 1, 1)).astype("int32")
    got = ir_eval("requantize", [biased, np.array(multiplier), np.array(zy, "uint8")])
    np.testing.assert_array_equal(got, ort_out)


def _qdq_model(op_type: str, inputs: list[str], consts: dict[str, np.ndarray], elem: int) -> Any:
    """dequantize each input (scale s<name>, zero point z<name>) -> op_type -> quantize
    (sc, zc): the chain ONNX Runtime fuses into its QLinear<op_type> kernel."""
    from onnx import helper, numpy_helper

    nodes = [helper.make_node("DequantizeLinear", [n, f"s{n}", f"z{n}"], [f"{n}d"]) for n in inputs]
    nodes.append(helper.make_node(op_type, [f"{n}d" for n in inputs], ["c"]))
    nodes.append(helper.make_node("QuantizeLinear", ["c", "sc", "zc"], ["cq"]))
    shape = [2, 64, 9]
    graph = helper.make_graph(
        nodes, "qdq",
        [helper.make_tensor_value_info(n, elem, shape) for n in inputs],
        [helper.make_tensor_value_info("cq", elem, shape)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_qnn_add_and_sigmoid_against_onnxruntimes_qlinear_kernels() -> None:
    """qnn_add is QLinearAdd, qnn_sigmoid QLinearSigmoid (a table of MLAS's logistic),
    qnn_softmax QLinearSoftmax (its table algorithm) and a quantised product (rule
    qdq-multiply) QLinearMul, bit for bit."""
    from onnx import TensorProto

    consts = {n: np.array(v, d) for n, v, d in [
        ("sa", 0.031, "float32"), ("za", 120, "uint8"), ("sb", 0.017, "float32"),
        ("zb", 3, "uint8"), ("sc", 0.043, "float32"), ("zc", 77, "uint8"),
    ]}  # fmt: skip
    a, b = (rnd(2, 64, 9, dtype="uint8", low=0, high=255) for _ in range(2))
    want = run_model(_qdq_model("Add", ["a", "b"], consts, TensorProto.UINT8), {"a": a, "b": b})
    args = [a, b, *(consts[n] for n in ("sa", "za", "sb", "zb", "sc", "zc"))]
    np.testing.assert_array_equal(ir_eval("qnn_add", args), want[0])
    product = run_model(_qdq_model("Mul", ["a", "b"], consts, TensorProto.UINT8), {"a": a, "b": b})
    shifted = [(v.astype("int32") - int(consts[z])) for v, z in ((a, "za"), (b, "zb"))]
    ratio = np.float32(consts["sa"] * consts["sb"]) / consts["sc"]
    np.testing.assert_array_equal(
        ir_eval("requantize", [shifted[0] * shifted[1], np.array(ratio), consts["zc"]]), product[0]
    )
    signed = {"sa": np.array(0.09, "float32"), "za": np.array(-7, "int8"),
              "sc": np.array(1 / 256, "float32"), "zc": np.array(-128, "int8")}  # fmt: skip
    x = rnd(2, 64, 9, dtype="int8", low=-128, high=127)
    want = run_model(_qdq_model("Sigmoid", ["a"], signed, TensorProto.INT8), {"a": x})[0]
    args = [x, *(signed[n] for n in ("sa", "za", "sc", "zc"))]
    np.testing.assert_array_equal(ir_eval("qnn_sigmoid", args), want)
    want = run_model(_qdq_model("Softmax", ["a"], signed, TensorProto.INT8), {"a": x})[0]
    np.testing.assert_array_equal(ir_eval("qnn_softmax", args, axis=-1), want)


@pytest.mark.parametrize(
    "c,f,size,k,stride,groups",
    [(24, 32, 14, 3, 1, 1), (8, 16, 9, 1, 1, 1), (16, 16, 12, 5, 2, 16)],
    ids=["k216", "pointwise", "depthwise"],
)
def test_conv2d_mlas_is_onnxruntimes_float_conv_bit_for_bit(c, f, size, k, stride, groups) -> None:
    """conv2d_mlas is the float Conv ONNX Runtime runs when its weights are not constant
    (a dequantized weight: no NCHWc rewrite), in MLAS's order of sums, its threads."""
    from egraph_ir.op.mlas import onnxruntime_threads

    x, w, b = rnd(1, c, size, size), rnd(f, c // groups, k, k), rnd(f)
    pad = k // 2
    attrs = {"pads": [pad] * 4, "strides": [stride] * 2, "group": groups}
    want = run_model(*single_op_model("Conv", [x, w, b], attrs))[0]
    got = ir_eval(
        "conv2d_mlas", [x, w, b], strides=(stride, stride), padding=(pad,) * 4,
        dilation=(1, 1), groups=groups, threads=onnxruntime_threads(),
    )  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_dense_mlas_is_onnxruntimes_float_matmul_bit_for_bit() -> None:
    """A MatMul of two inputs (nothing prepacked) whose columns, split between threads or
    not, are at least K: MLAS sums K in slices of 128."""
    a, b = rnd(8, 300), rnd(300, 512)
    want = run_onnx("MatMul", [a, b])[0]
    np.testing.assert_array_equal(ir_eval("dense_mlas", [a, b.T.copy()], stride_k=128), want)
    assert (ir_eval("dense_mlas", [a, b.T.copy()], stride_k=300) != want).any()  # one chain
    np.testing.assert_array_equal(ir_eval("matmul_mlas", [a, b], stride_k=128), want)


def test_every_registered_op_has_a_reference_test() -> None:
    assert set(op.list_ops()) - COVERED == set()
