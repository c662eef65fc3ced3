"""benchmarks/transformer_files.py writes GPT-2 and BERT as torch.onnx.export writes them;
small ones (two layers, 64 wide) compile and match ONNX Runtime (GPT-2's GELU cube as
multiplies), the decoding step at two past lengths with one build."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import codegen

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "transformer_files.py"


def _files():  # the script's module (benchmarks/ is no package)
    spec = importlib.util.spec_from_file_location("transformer_files", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_both(model, feeds: dict[str, np.ndarray]) -> tuple[list, list, codegen.Executable]:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    exe = codegen.build(model)
    got = exe.run(**feeds)
    return list(got if isinstance(got, tuple) else (got,)), session.run(None, feeds), exe


# float32 sums of up to 256 products in another order, through two layers: 2e-5 of values
# of size ~1 (measured 2.4e-6)
TOLERANCE = {"rtol": 1e-4, "atol": 2e-5}


def test_a_small_gpt2_file_compiles_and_matches_onnxruntime() -> None:
    model = _files().gpt2(layers=2, hidden=64, heads=4, vocab=300, seq=12, batch=2)
    ids = np.random.default_rng(0).integers(0, 300, (2, 12)).astype(np.int64)
    got, want, exe = _run_both(model, {"input_ids": ids})
    assert "llvm.pow" not in exe.get_source()
    np.testing.assert_allclose(got[0], want[0], **TOLERANCE)


def test_a_small_gpt2_step_runs_every_past_length_with_one_build() -> None:
    model = _files().gpt2_step(layers=2, hidden=64, heads=4, vocab=300)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    exe = codegen.build(model)
    rng = np.random.default_rng(1)
    for past in (3, 12):  # within the first capacity (16): nothing built after the build
        feeds = {"input_ids": np.array([[5]], np.int64)}
        for layer in range(2):
            for part in "kv":
                cache = rng.standard_normal((1, 4, past, 16)).astype(np.float32)
                feeds[f"past_{layer}_{part}"] = cache
        for g, w in zip(exe.run(**feeds), session.run(None, feeds), strict=True):
            np.testing.assert_allclose(g, w, **TOLERANCE)
    assert len(exe.compiles) == 1


def test_a_small_bert_file_compiles_and_matches_onnxruntime() -> None:
    model = _files().bert(layers=2, hidden=64, heads=4, vocab=300, seq=12, batch=2)
    ids = np.random.default_rng(2).integers(0, 300, (2, 12)).astype(np.int64)
    got, want, _ = _run_both(model, {"input_ids": ids})
    np.testing.assert_allclose(got[0], want[0], **TOLERANCE)
