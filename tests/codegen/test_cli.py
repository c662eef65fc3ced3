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


def test_rules_check_exit_status_and_report(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data"
    assert main(["rules", "check", "cast", "--max-examples", "10"]) == 0
    assert "cast: 5 rule(s) checked, 0 unsound" in capsys.readouterr().out
    assert main(["rules", "check", str(data / "unsound.rules"), "--max-examples", "30"]) == 1
    out = capsys.readouterr().out
    assert "rule 'sqrt-of-square' is unsound" in out and "left gives" in out
    assert main(["rules", "check", str(data / "missing.rules")]) == 2
    assert "cannot read rule file" in capsys.readouterr().err
