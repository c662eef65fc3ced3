"""benchmarks/gpt2_file.py writes a GPT-2 as torch.onnx.export writes one; a small one
(two layers, 64 wide) compiles and matches ONNX Runtime, its GELU cube as multiplies."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import codegen

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpt2_file.py"


def test_a_small_gpt2_file_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    spec = importlib.util.spec_from_file_location("gpt2_file", SCRIPT)
    assert spec is not None and spec.loader is not None
    gpt2_file = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt2_file)
    model = gpt2_file.gpt2(layers=2, hidden=64, heads=4, vocab=300, seq=12, batch=2)
    ids = np.random.default_rng(0).integers(0, 300, (2, 12)).astype(np.int64)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"input_ids": ids})[0]
    exe = codegen.build(model)
    assert "llvm.pow" not in exe.get_source()
    # float32 sums of up to 256 products in another order, through two layers: 2e-5 of
    # logits of size ~1 (measured 2.4e-6)
    np.testing.assert_allclose(exe.run(input_ids=ids), want, rtol=1e-4, atol=2e-5)
