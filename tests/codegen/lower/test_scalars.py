"""Scalar constants bound by the launch (codegen/lower/scalars.py): kernels that differ
only in them compile once and each computes with its own values; the constants LLVM
needs as constants stay in the code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.build import unique_kernels
from codegen.loop_ir import (
    INDEX,
    Bin,
    Cast,
    Const,
    For,
    Kernel,
    Load,
    LoopVar,
    Store,
    rounded_product,
    walk,
)
from codegen.lower.scalars import hoist
from egraph_ir import op
from egraph_ir.testing import assert_allclose

from ...hosts import force_int8_kernels

# scales and offsets as layers have them; none a value every layer shares (0, 1, 0.5, 2:
# kept in the code) or one the simplifier removes (x * 1, x + 0)
SCALES = st.floats(0.0625, 0.4375, width=32)
OFFSETS = st.floats(-1.875, -1.125, width=32)


def _layers(constants: list[tuple[float, float]]) -> ir.Function:
    """Layers clip(x @ W * a + b): a product each (the anchor of its own fused group),
    the scale, offset and clip its epilogue; the weights differ too (bound as buffers)."""
    rng = np.random.default_rng(0)
    x = ir.var("x", shape=(4, 33))
    body: ir.Expr = x
    for a, b in constants:
        w = ir.const((rng.standard_normal((33, 33)) * 0.2).astype("float32"))
        scaled = op.add(op.multiply(op.dense(body, w), ir.const(np.float32(a))), ir.const(b))
        body = op.clip(scaled, -3, 3)
    return ir.Function([x], body)


@given(st.lists(st.tuples(SCALES, OFFSETS), min_size=2, max_size=4), st.integers(0, 2**16))
def test_layers_that_differ_in_constants_share_one_kernel_each_with_its_own(
    constants: list[tuple[float, float]], seed: int
) -> None:
    fn = _layers(constants)
    x = np.random.default_rng(seed).standard_normal((4, 33)).astype("float32")
    exe = codegen.build(fn)
    assert_allclose(exe.run(x=x), ir.interpret(fn, x=x), what=str(fn))
    # one kernel serves every layer (baked into the code, each layer was one of its own)
    assert len(exe.graph.kernels()) == len(constants)
    assert len(unique_kernels(exe.graph)) == 1


def test_what_llvm_needs_as_constants_stays_in_the_code() -> None:
    i = LoopVar(INDEX, "i")
    x = Load("float32", "in0", i)
    n = Load("int32", "in1", i)
    values = [
        Bin("float32", "mul", x, Const("float32", 0.37)),  # a scale: bound
        Bin("float32", "div", x, Const("float32", 0.25)),  # a power of two: a multiply
        Bin("float32", "div", x, Const("float32", 0.3)),  # a true division either way
        Bin("float32", "pow", x, Const("float32", 3.0)),  # an exponent
        Bin("int32", "div", n, Const("int32", 7)),  # an integer divisor
        Bin("int32", "sub", n, Const("int32", 13)),  # a zero point: bound
        Bin("int32", "max", n, Const("int32", -128)),  # a clamp every layer shares
        Bin("float32", "add", x, Const("float32", 1.0)),
    ]
    body = [For("i", 8, [Store("out", i, v) for v in values], outer=True)]
    kernel = Kernel("k", [], body, 8)
    hoist(kernel)
    kept = {e.value for e in walk(kernel.body)[1] if isinstance(e, Const) and e.dtype != INDEX}
    assert kept == {0.25, 3.0, 7, -128, 1.0}
    assert {k: list(v) for k, v in kernel.scalars.items()} == {
        "s_float32": [np.float32(0.37), np.float32(0.3)],
        "s_int32": [13],
    }
    assert [b.name for b in kernel.buffers] == ["s_float32", "s_int32"]


def test_a_float64_that_is_a_float32_stays_a_widened_float32() -> None:
    """A folded cast of a float32 scale is read as the float32 it widens (so the emitter's
    rounded products still see it); any other float64 keeps its precision."""
    i = LoopVar(INDEX, "i")
    x = Load("float64", "in0", i)
    product = Bin(
        "float64", "mul", Cast("float64", Load("float32", "in1", i)), Const("float64", 0.75)
    )
    values = [Cast("float32", product), Bin("float64", "mul", x, Const("float64", 0.044715))]
    kernel = Kernel("k", [], [For("i", 8, [Store("out", i, v) for v in values], outer=True)], 8)
    hoist(kernel)
    assert {k: list(v) for k, v in kernel.scalars.items()} == {
        "s_float32": [0.75],
        "s_float64": [0.044715],
    }
    first = kernel.body[0].body[0].value  # type: ignore[attr-defined]
    assert rounded_product(first) is not None


@pytest.fixture
def _int8_kernels() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        force_int8_kernels(patch)
        yield


@pytest.mark.usefixtures("_int8_kernels")
def test_quantised_layers_of_one_form_compile_once_and_equal_onnxruntime(
    tmp_path: Path,
) -> None:
    """Four equal convolution layers quantised by onnxruntime (int8 activations): their
    scales and zero points differ, their kernels do not."""
    pytest.importorskip("onnxruntime.quantization")
    from onnx import helper as h

    from ..test_quantized import _float_model, _quantize_static, int8_reference

    names = ["x", "r1", "r2", "r3", "y"]
    nodes = []
    for k in range(4):
        nodes += [
            h.make_node("Conv", [names[k], f"w{k}", f"b{k}"], [f"c{k}"], pads=[1] * 4),
            h.make_node("Relu", [f"c{k}"], [names[k + 1]]),
        ]
    weights = {n: s for k in range(4) for n, s in ((f"w{k}", (16, 16, 3, 3)), (f"b{k}", (16,)))}
    shape = (1, 16, 12, 12)
    path = _float_model(tmp_path / "stack.onnx", nodes, weights, 0, 0.3, [*shape], [*shape])
    model = _quantize_static(path, tmp_path / "q.onnx", shape, "x", activations="int8")
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    import onnx

    want = int8_reference(onnx.load(str(model)), {"x": x})[0]
    exe = codegen.build(str(model))
    np.testing.assert_array_equal(exe.run(x=x), want)
    convs = [k for k in exe.graph.kernels() if "qnn_conv2d" in k.ops]
    assert len(convs) == 4
    # the products of the first three layers are one function; the last one's
    # dequantizes its result too (baked per layer, they were four)
    products = [j.name for k in convs for j in k.jit_kernels() if not j.name.endswith("pack")]
    assert len(products) == 4 and len(set(products)) == 2, products
