"""ONNX models with symbolic dimensions import once, without shapes=: the shape arithmetic
exporters emit folds into size expressions (egraph_ir/frontend/onnx/sizes.py), and the program runs
at every consistent shape, equal to ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import egraph_ir as ir
from egraph_ir.frontend.onnx import from_onnx

ort = pytest.importorskip("onnxruntime")
INT64 = onnx.TensorProto.INT64


def _const(name: str, value) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value))
    )


def _decoder_like() -> onnx.ModelProto:
    """The shape code of a decoder step, as torch.onnx.export writes it: positions
    past .. past + seq from Shape/Gather/Add/Range, a (seq, past + seq) causal mask from
    them, the cache grown by Concat, and a Reshape whose target is built from Shape values
    with the -1 resolved through a Where on Equal(shape, -1)."""
    nodes = [
        helper.make_node("Shape", ["past"], ["past_shape"]),
        _const("two", np.int64(2)),
        helper.make_node("Gather", ["past_shape", "two"], ["past_len"], axis=0),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Gather", ["x_shape", "two"], ["seq"], axis=0),
        helper.make_node("Add", ["past_len", "seq"], ["total"]),
        _const("step", np.int64(1)),
        helper.make_node("Range", ["past_len", "total", "step"], ["positions"]),
        _const("zero_axis", np.array([0], np.int64)),
        helper.make_node("Range", ["zero_scalar", "total", "step"], ["keys"]),
        helper.make_node("Unsqueeze", ["positions", "one_axis"], ["rows"]),
        helper.make_node("LessOrEqual", ["keys", "rows"], ["allowed"]),
        helper.make_node("Cast", ["allowed"], ["mask"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Concat", ["past", "x"], ["present"], axis=2),
        # scores (1, 1, seq, total): queries from x times keys of the cache
        helper.make_node("Transpose", ["present"], ["keys_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["x", "keys_t"], ["scores"]),
        helper.make_node("Mul", ["scores", "mask"], ["masked"]),
        # reshape to (1, seq, -1) from Shape values, through the Equal/Where guard
        helper.make_node("Unsqueeze", ["seq", "zero_axis"], ["seq1"]),
        _const("lead", np.array([1], np.int64)),
        _const("minus1", np.array([-1], np.int64)),
        helper.make_node("Concat", ["lead", "seq1", "minus1"], ["target"], axis=0),
        helper.make_node("Equal", ["target", "minus1"], ["is_free"]),
        _const("ones", np.array([1, 1, 1], np.int64)),
        helper.make_node("Where", ["is_free", "ones", "target"], ["expand_to"]),
        helper.make_node("Reshape", ["masked", "target"], ["flat"]),
        helper.make_node("Expand", ["lead_scalar_f", "expand_to"], ["bias"]),
        helper.make_node("Add", ["flat", "bias"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.int64(0), "zero_scalar"),
        numpy_helper.from_array(np.array([1], np.int64), "one_axis"),
        numpy_helper.from_array(np.float32(0.5).reshape(1, 1, 1), "lead_scalar_f"),
    ]
    inputs = [
        helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, "seq", 4]),
        helper.make_tensor_value_info("past", onnx.TensorProto.FLOAT, [1, 1, "past", 4]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None),
        helper.make_tensor_value_info("present", onnx.TensorProto.FLOAT, None),
    ]
    graph = helper.make_graph(nodes, "decoder_like", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_exporter_shape_code_folds_and_runs_at_every_shape_like_onnxruntime() -> None:
    model = _decoder_like()
    mod = from_onnx(model)
    text = str(mod)
    assert "Tensor[(1, 1, seq, 4), float32]" in text and "Shape" not in text
    assert "arange(start=dim(past), stop=dim(past + seq)" in text
    assert str(mod["main"].checked_type.ret.fields[1]) == "Tensor[(1, 1, past + seq, 4), float32]"
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for seq, past in [(1, 0), (1, 7), (3, 0), (5, 11)]:
        feeds = {
            "x": rng.standard_normal((1, 1, seq, 4)).astype(np.float32),
            "past": rng.standard_normal((1, 1, past, 4)).astype(np.float32),
        }
        want = session.run(None, feeds)
        got = ir.interpret(mod, **feeds)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)  # one float32 product


def test_a_decoders_first_step_fixed_at_past_0_leaves_the_empty_cache_out() -> None:
    """shapes= with past 0 (a decoder's first step built on its own): the Concat joining
    the empty cache to the new rows imports as the new rows, so no group touches an empty
    tensor and falls back to numpy on the host (250 us a group on GPT-2's heads)."""
    import codegen

    model = _decoder_like()
    mod = from_onnx(model, shapes={"x": (1, 1, 3, 4), "past": (1, 1, 0, 4)})
    assert "concatenate" not in str(mod)
    exe = codegen.build(mod)
    assert "host" not in exe.kernel_kinds()
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.standard_normal((1, 1, 3, 4)).astype(np.float32),
        "past": np.zeros((1, 1, 0, 4), np.float32),
    }
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip(exe.run(**feeds), session.run(None, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_comparison_no_size_decides_is_an_error_naming_it() -> None:
    """Equal(seq, 5) holds for one size only: the importer refuses it rather than fold
    a value that is right for some shapes."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        _const("five", np.array([5, 4], np.int64)),
        helper.make_node("Equal", ["s", "five"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["seq", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.BOOL, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ir.FrontendError, match=r"Equal.*cannot decide seq == 5"):
        from_onnx(model)


def _bert_feeds(rng, batch: int, seq: int) -> dict[str, np.ndarray]:
    ids = rng.integers(0, 30522, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq // 2 :] = 0  # the last row padded, as a batch of unequal lengths is
    return {"input_ids": ids, "attention_mask": mask}


def _gpt2_feeds(rng, past: int) -> dict[str, np.ndarray]:
    feeds = {
        "input_ids": np.array([[5]], np.int64),
        "attention_mask": np.ones((1, past + 1), np.int64),
    }
    for layer in range(2):
        for kind in "kv":
            feeds[f"past_{layer}_{kind}"] = rng.standard_normal((1, 4, past, 32)).astype(np.float32)
    return feeds


@pytest.mark.slow
def test_the_shared_dynamic_models_import_once_and_match_onnxruntime(shared_models: Path) -> None:
    """BERT with symbolic batch and seq, GPT-2's step with its KV cache: one import each,
    run in the interpreter at five shapes each (past 0 included) against ONNX Runtime.
    1e-5: float32 sums of 128 products in a different order (the issue allows 1e-4)."""
    rng = np.random.default_rng(1)
    cases = [
        ("bert_dyn_128_2.onnx", [_bert_feeds(rng, b, s) for b, s in [(2, 37), (1, 1), (4, 64), (3, 128), (1, 384)]]),
        ("gpt2_past_128_2_4.onnx", [_gpt2_feeds(rng, p) for p in (0, 1, 16, 127, 200)]),
    ]  # fmt: skip
    for name, feeds_list in cases:
        path = shared_models / "dynamic" / name
        mod = from_onnx(path)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for feeds in feeds_list:
            got = ir.interpret(mod, **feeds)
            got = got if isinstance(got, tuple) else (got,)
            for g, w in zip(got, session.run(None, feeds), strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
