"""The egc command line."""

from __future__ import annotations

import pytest

from codegen.cli import main


def test_demo_prints_a_summary_and_runs_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--show-ir", "5"]) == 0
    out = capsys.readouterr().out
    assert "model: transformer (built-in)" in out
    assert "matmul x8" in out and "matmul x6" in out  # Q/K/V combined
    assert "SimplifyInference:" in out and "stopped: saturated" in out
    assert "result: ok" in out
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


def _onnx_with(tmp_path, nodes, name="m.onnx"):
    import onnx
    from onnx import helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_compile_checks_against_onnxruntime_and_writes_json_and_dot(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from onnx import helper

    path = _onnx_with(
        tmp_path, [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    )
    dot, edot = tmp_path / "out.dot", tmp_path / "egraph.dot"
    assert (
        main(
            [
                "compile",
                str(path),
                "--check",
                "--json",
                "--dot",
                str(dot),
                "--egraph-dot",
                str(edot),
            ]
        )
        == 0
    )
    assert "subgraph cluster_" in edot.read_text()
    report = json.loads(capsys.readouterr().out)
    assert report["onnxruntime"]["agrees"] and report["ok"]
    assert report["before"]["op_calls"] == 2 and report["after"]["op_calls"] == 0
    assert dot.read_text().startswith("digraph module")
    assert main(["compile", str(path), "--time-passes", "--disable", "AlgebraicSimplify"]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime:" in out and "(agrees)" in out and "AlgebraicSimplify" not in out


def test_compile_reports_bad_input_with_status_two(tmp_path, capsys) -> None:
    from onnx import helper

    path = _onnx_with(tmp_path, [helper.make_node("Hardmax", ["x"], ["y"], name="hm")])
    assert main(["compile", str(path)]) == 2
    assert "unsupported ONNX ops: Hardmax (nodes: hm)" in capsys.readouterr().err
    assert main(["compile", str(tmp_path / "missing.onnx")]) == 2
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"garbage")
    assert main(["compile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "no such ONNX file" in err and "not a readable ONNX model" in err
    assert "Traceback" not in err


def test_opt_reads_and_writes_the_text_format(tmp_path, capsys) -> None:
    src = tmp_path / "in.ir"
    src.write_text("def @main(%x: Tensor[(2,), float32]) { negative(negative(%x)) }")
    out = tmp_path / "out.ir"
    assert main(["opt", str(src), "--passes", "InferType,AlgebraicSimplify", "-o", str(out)]) == 0
    assert "{\n  %x\n}" in out.read_text()
    assert main(["opt", str(src), "--passes", "InferType,Bogus"]) == 2
    assert "unknown pass 'Bogus'" in capsys.readouterr().err
