"""The egc command line."""

from __future__ import annotations

import pytest

from codegen.cli import main


def test_demo_prints_a_summary_and_runs_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--show-ir", "5"]) == 0
    out = capsys.readouterr().out
    assert "model: transformer" in out
    assert "matmul x8" in out
    assert "finite True" in out
    assert "def @main(%x: Tensor[(1, 128, 256), float32])" in out


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_demo_other_models(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", model, "--show-ir", "0"]) == 0
    assert f"model: {model}" in capsys.readouterr().out
