"""Data movement between a dequantize and a quantize of one scale and zero point runs on the
8-bit values (rules/builtin/quantize.rules, qdq-reshape ... qdq-concatenate): each pattern
is formed by FakeQuantizationToInteger (without it the float chain stays, so the test can
fail), computes the interpreter's values, and a channel shuffle block (ShuffleNet's
Reshape/Transpose between QDQ pairs) equals ONNX Runtime."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op

SHAPE = (2, 3, 1, 5)
MOVES: dict[str, Callable[[ir.Expr], ir.Expr]] = {
    "reshape": lambda x: op.reshape(x, newshape=(2, 3, -1)),
    "transpose": lambda x: op.transpose(x, axes=(0, 2, 1, 3)),
    "flatten": lambda x: op.flatten(x, axis=2),
    "squeeze": lambda x: op.squeeze(x, axis=(2,)),
    "expand_dims": lambda x: op.expand_dims(x, axis=1, num_newaxis=2),
    "strided_slice": lambda x: op.strided_slice(x, begin=(1,), end=(3,), axes=(3,)),
}


def _qdq(body: Callable[[ir.Expr], ir.Expr], dtype: str) -> ir.Function:
    x = ir.var("x", shape=SHAPE, dtype=dtype)
    scale = ir.const(np.array(0.037, "float32"))
    zero = ir.const(np.array(7 if dtype == "uint8" else -7, dtype))
    moved = body(op.dequantize(x, scale, zero))
    return ir.Function([x], op.quantize(moved, scale, zero))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("name", sorted(MOVES))
def test_each_move_runs_on_the_bytes(name: str, dtype: str) -> None:
    fn = _qdq(MOVES[name], dtype)
    with pm.PassContext():
        integer = pm.passes.FakeQuantizationToInteger()(ir.infer_type(ir.IRModule.from_expr(fn)))
    text = str(integer["main"])
    assert "dequantize" not in text and "quantize(" not in text, text
    info = np.iinfo(dtype)
    value = np.random.default_rng(1).integers(info.min, info.max + 1, SHAPE).astype(dtype)
    want = ir.interpret(fn, x=value)
    np.testing.assert_array_equal(ir.interpret(integer, x=value), want)
    np.testing.assert_array_equal(codegen.build(fn).run(x=value), want)


def test_a_concatenation_of_one_scale_runs_on_the_bytes() -> None:
    x, w = (ir.var(n, shape=(1, 4, 3, 3), dtype="uint8") for n in "xw")
    scale, zero = ir.const(np.array(0.02, "float32")), ir.const(np.array(9, "uint8"))
    parts = [op.dequantize(v, scale, zero) for v in (x, w)]
    fn = ir.Function([x, w], op.quantize(op.concatenate(*parts, axis=1), scale, zero))
    with pm.PassContext():
        integer = pm.passes.FakeQuantizationToInteger()(ir.infer_type(ir.IRModule.from_expr(fn)))
    assert "dequantize" not in str(integer["main"])
    rng = np.random.default_rng(2)
    a, b = (rng.integers(0, 256, (1, 4, 3, 3)).astype("uint8") for _ in range(2))
    np.testing.assert_array_equal(ir.interpret(integer, x=a, w=b), ir.interpret(fn, x=a, w=b))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_a_channel_shuffle_between_qdq_pairs_equals_onnxruntime(dtype: str) -> None:
    """conv -> Q/DQ -> Reshape (1, 2, C/2, H, W) -> Q/DQ -> Transpose -> Q/DQ -> Reshape ->
    Q/DQ -> conv, as ONNX Runtime's quantiser writes a ShuffleNet unit: the moves run on
    the bytes between the two integer convolutions; the outputs equal ONNX Runtime's."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    rng = np.random.default_rng(3)
    c, size = 16, 6
    zq = np.array(3 if dtype == "uint8" else -3, dtype)
    inits = {
        "s": np.array(0.05, np.float32), "z": zq,
        "sx": np.array(0.03, np.float32), "zx": zq,
        "w1": rng.integers(-63, 64, (c, c, 1, 1)).astype(np.int8),
        "w2": rng.integers(-63, 64, (c, c, 1, 1)).astype(np.int8),
        "sw": np.array(0.004, np.float32), "zw": np.array(0, np.int8),
        "split": np.array([1, 2, c // 2, size, size], np.int64),
        "merge": np.array([1, c, size, size], np.int64),
    }  # fmt: skip
    node = helper.make_node

    def qdq(src: str, dst: str, s: str = "s", z: str = "z") -> list:
        return [node("QuantizeLinear", [src, s, z], [dst + "q"]),
                node("DequantizeLinear", [dst + "q", s, z], [dst])]  # fmt: skip

    nodes = [
        *qdq("x", "xf", "sx", "zx"),
        node("DequantizeLinear", ["w1", "sw", "zw"], ["w1f"]),
        node("DequantizeLinear", ["w2", "sw", "zw"], ["w2f"]),
        node("Conv", ["xf", "w1f"], ["c1"]),
        *qdq("c1", "c1f"),
        node("Reshape", ["c1f", "split"], ["r1"]),
        *qdq("r1", "r1f"),
        node("Transpose", ["r1f"], ["t"], perm=[0, 2, 1, 3, 4]),
        *qdq("t", "tf"),
        node("Reshape", ["tf", "merge"], ["r2"]),
        *qdq("r2", "r2f"),
        node("Conv", ["r2f", "w2f"], ["c2"]),
        *qdq("c2", "y", "sx", "zx"),
    ]
    graph = helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("x", 1, [1, c, size, size])],
        [helper.make_tensor_value_info("y", 1, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    mod = ir.frontend.from_onnx(model)
    with pm.PassContext():
        integer = pm.passes.FakeQuantizationToInteger()(ir.infer_type(mod))
    moved = [n for n in ir.visitor.post_order(integer["main"].body) if isinstance(n, ir.Call)]
    kinds = {
        n.op.name: n.checked_type.dtype for n in moved if n.op.name in ("reshape", "transpose")
    }
    # each pair is one Q -> one DQ: int8 ones become uint8 as in ONNX Runtime (ort_islands.py)
    assert kinds == {"reshape": "uint8", "transpose": "uint8"}
    x = (rng.standard_normal((1, c, size, size)) * 2).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pm.PassContext(opt_level=3):
        got = codegen.build(mod).run(x)
    want = session.run(None, {"x": x})[0]
    assert np.abs(got - want).max() <= 0.03 + 1e-6  # within one output quantum (see below)
    if dtype == "uint8":  # ONNX Runtime fuses both convolutions as QLinearConv: exact
        np.testing.assert_array_equal(got, want)
