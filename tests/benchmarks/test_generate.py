"""benchmarks/generate.py runs in the suite on the small decoder of ../shared: greedy
generation through one symbolic build gives ONNX Runtime's tokens (it exits non-zero
where they differ) and compiles nothing after the build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "generate.py"


@pytest.mark.slow
def test_greedy_generation_gives_onnxruntimes_tokens(shared_models: Path) -> None:
    pytest.importorskip("onnxruntime")
    model = shared_models / "dynamic" / "gpt2_past_128_2_4.onnx"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(model), "--prompt", "3", "--tokens", "4"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr + run.stdout
    assert "tokens identical" in run.stdout
    # one program for every past length, built with codegen.build: nothing more compiled
    assert "builds in all: 1" in run.stdout
