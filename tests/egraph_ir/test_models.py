"""The built-in models: well-typed, and equal to the reference ONNX files and to numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import egraph_ir as ir
from egraph_ir import models
from egraph_ir.summary import summarize


@pytest.mark.parametrize("name", models.NAMES)
def test_models_type_check_and_report_work(name: str) -> None:
    mod = models.get(name)
    ir.infer_type(mod)
    s = summarize(mod)
    assert s.num_calls > 5 and s.flops > 1e6


@pytest.mark.onnx
@pytest.mark.parametrize("name", models.NAMES)
def test_models_match_the_reference_onnx_files(name: str, shared_models) -> None:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(
        str(shared_models / f"{name}.onnx"), providers=["CPUExecutionProvider"]
    )
    x = models.example_inputs(name)
    expected = sess.run(None, x)[0]
    # float32 through ~10 layers of 256-1024-term dot products: a few ulps of the magnitudes
    np.testing.assert_allclose(ir.interpret(models.get(name), **x), expected, rtol=1e-4, atol=1e-5)


def test_mlp_matches_plain_numpy() -> None:
    mod = models.mlp()
    consts = [n.data for n in ir.post_order(mod["main"]) if isinstance(n, ir.Constant)]
    w1, b1, w2, b2, w3, b3 = consts
    x = models.example_inputs("mlp")["x"]
    h = np.maximum(x @ w1 + b1, 0)
    h = np.maximum(h @ w2 + b2, 0)
    logits = h @ w3 + b3
    e = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(
        ir.interpret(mod, x), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7
    )


def test_elementwise_matches_its_formula() -> None:
    mod = models.elementwise()
    a, b = [
        n.data for n in ir.post_order(mod["main"]) if isinstance(n, ir.Constant) and n.data.ndim
    ]
    x = models.example_inputs("elementwise")["x"][:64]
    u = x.astype(np.float64) * a + b
    gelu = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
    expected = gelu / (1 + np.exp(-x)) + np.tanh(x)
    full = ir.interpret(mod, models.example_inputs("elementwise")["x"])[:64]
    np.testing.assert_allclose(full, expected, rtol=1e-5, atol=1e-6)


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="built-in models: mlp, cnn, transformer, elementwise"):
        models.get("resnet")
