"""The egc command line."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import codegen
import egraph_ir as ir
from egc.cli.main import main
from egraph_ir import models


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

    data = Path(__file__).resolve().parents[2] / "data"
    assert main(["rules", "check", "cast", "--max-examples", "10"]) == 0
    assert "cast: 5 rule(s) checked, 0 unsound" in capsys.readouterr().out
    assert main(["rules", "check", str(data / "unsound.rules"), "--max-examples", "30"]) == 1
    out = capsys.readouterr().out
    assert "rule 'sqrt-of-square' is unsound" in out and "left gives" in out
    assert main(["rules", "check", str(data / "missing.rules")]) == 2
    assert "no such rule file or built-in rule set" in capsys.readouterr().err


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
    args = ["compile", str(path), "--time-passes", "--disable", "AlgebraicSimplify", "--check"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "compiled - onnxruntime" in out and "(agrees" in out
    assert "AlgebraicSimplify" not in out


def test_compile_reports_bad_input_with_status_two(tmp_path, capsys) -> None:
    from onnx import helper

    path = _onnx_with(tmp_path, [helper.make_node("Unique", ["x"], ["y"], name="hm")])
    assert main(["compile", str(path)]) == 2
    assert "unsupported ONNX ops: Unique x1 (nodes: hm)" in capsys.readouterr().err
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


def egc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command, in a fresh process (what a user runs)."""
    exe = Path(sys.executable).with_name("egc")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_the_report_lists_each_kernels_choice_in_run_order(tmp_path: Path) -> None:
    """--report: ops, kernel kind, layout written, predicted beside measured; from a
    compile and from a saved executable."""
    out = tmp_path / "cnn.egc"
    r = egc("compile", "cnn", "--opt-level", "3", "--no-cache", "--report", "-o", str(out))
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("the extraction's choices (run order)\n", 1)[1]
    header, first = table.splitlines()[:2]
    assert header.split() == [
        "kernel", "computes", "ops", "kernel", "kind", "layout", "predicted", "us", "measured", "us"
    ]  # fmt: skip
    # the CNN's two 3x3 layers: its RGB stem written into blocks, then Winograd's kernel
    assert first.startswith("k1_conv2d_nchwc") and " NCHW16c " in first
    assert "conv/nchwc-winograd" in table
    assert "layouts written: " in r.stdout and "cost model: 3 kernels priced" in r.stdout
    r = egc("run", str(out), "--random", "--report", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["choices"][1].startswith("layout conversions: 1: ")
    assert [k["layout"] for k in sorted(report["profile"], key=lambda k: k["order"])][:2] == [
        "NCHW16c", "NCHW16c"
    ]  # fmt: skip


def test_compile_saves_and_run_loads_in_another_process(tmp_path: Path) -> None:
    out = tmp_path / "mlp.egc"
    r = egc("compile", "mlp", "-o", str(out), "--repeats", "1", "--profile")
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout and "per-kernel profile" in r.stdout
    x = models.example_inputs("mlp")["x"]
    np.save(tmp_path / "x.npy", x)
    r = egc(
        "run", str(out), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npz")
    )
    assert r.returncode == 0, r.stderr
    expected = ir.interpret(models.mlp(), x=x)
    np.testing.assert_allclose(
        np.load(tmp_path / "y.npz")["output"], expected, rtol=1e-4, atol=1e-5
    )
    r = egc("run", str(out))
    assert (
        r.returncode == 2 and "no value for input(s) x" in r.stderr and "Traceback" not in r.stderr
    )


def test_keygen_sign_and_run_only_trusted_files(tmp_path: Path) -> None:
    r = egc("keygen", "me", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "me.key").stat().st_mode & 0o077 == 0
    assert egc("keygen", "other", cwd=tmp_path).returncode == 0
    r = egc("compile", "mlp", "-o", "m.egc", "--repeats", "1", "--sign-key", "me.key", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = egc("run", "m.egc", "--random", "--trusted-key", "me.pub", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = egc("run", "m.egc", "--random", "--trusted-key", "other.pub", cwd=tmp_path)
    assert r.returncode == 2 and "not from a trusted key" in r.stderr
    r = egc("run", "m.egc", "--random", "--require-signature", cwd=tmp_path)
    assert r.returncode == 2 and "needs at least one --trusted-key" in r.stderr
    assert "Traceback" not in r.stderr


def test_run_names_every_leaf_of_a_nested_tuple_output(tmp_path: Path) -> None:
    """`egc run` raised a raw error on a valid saved model returning (a, (b, c))."""
    mod = ir.parse("def @main(%x: Tensor[(2,), float32]) { (relu(%x), (exp(%x), negative(%x))) }")
    codegen.build(mod).save(str(tmp_path / "nested.egc"))
    r = egc("run", "nested.egc", "--random", "--output", "o.npz", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(np.load(tmp_path / "o.npz").files) == ["output0", "output1", "output2"]


def test_emit_onnx_runs_in_onnxruntime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime as ort

    path = tmp_path / "cnn.onnx"
    assert main(["compile", "cnn", "--emit-onnx", str(path), "--repeats", "1"]) == 0
    inputs = models.example_inputs("cnn")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, inputs)[0]
    np.testing.assert_allclose(got, ir.interpret(models.cnn(), **inputs), rtol=1e-4, atol=1e-5)


def test_version_list_and_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("egc ")
    for what, expected in [
        ("passes", "FoldScaleAxis"),
        ("rules", "algebraic"),
        ("ops", "conv2d"),
        ("targets", "llvm"),
        ("configs", "eqsat.node_limit"),
    ]:
        assert main(["list", what]) == 0
        assert expected in capsys.readouterr().out
    args = ["compile", "mlp", "--repeats", "1", "--json", "--config", "codegen.num_threads=1"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["backend"] == "llvm (1 threads)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compile", "transformr"], "did you mean 'transformer'"),
        (["compile", "mlp", "--rules", "algebrac"], "did you mean 'algebraic'"),
        (["compile", "mlp", "--disable", "FoldScaleAxsi"], "did you mean 'FoldScaleAxis'"),
        (["compile", "mlp", "--print-ir-after", "FuseOp"], "did you mean 'FuseOps'"),
        (["opt", "-", "--passes", "EqSat(rules=algebraic"], "expected ',' or ')'"),
    ],
)
def test_bad_names_are_one_line_errors_with_a_hint(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("def @main(%x: float32) { %x }"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("egc: error:") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["compile", "mlp", "--config", "eqsat.node_limt=5"],
        ["compile", "mlp", "--config", "eqsat.node_limit=many"],
        ["rules", "check", "cast", "--max-examples", "0"],
        ["rules", "check", "cast", "--seed", "-1"],
        ["compile", "mlp", "--shape", "x=a,b"],
    ],
)
def test_bad_values_are_usage_errors(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_several_rule_files_and_built_in_sets(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "mine.rules"
    rules.write_text("rule neg-neg [algebraic]\n    negative(negative(?x)) => ?x\n")
    args = ["compile", "mlp", "--repeats", "1", "--rules", str(rules), "algebraic", "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["ok"]


def test_unreadable_and_unwritable_files_are_one_line_errors(tmp_path: Path, capsys) -> None:
    latin = tmp_path / "latin.ir"
    latin.write_bytes("def @main(%x: float32) { %x } # caf\xe9".encode("latin-1"))
    assert main(["opt", str(latin), "--passes", "InferType"]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    src = tmp_path / "ok.ir"
    src.write_text("def @main(%x: float32) { %x }")
    assert main(["opt", str(src), "--passes", "InferType", "-o", "/nonexistent/dir/out.ir"]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main(["compile", "mlp", "--repeats", "1", "--dot", "/nonexistent/d.dot"]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_run_benchmarks_with_warmup_percentiles_and_json(tmp_path: Path) -> None:
    """`egc run --repeats N --json` is a latency benchmark (as onnxruntime_perf_test):
    exactly N timed runs after the warm-up, ordered percentiles, throughput, threads."""
    assert egc("compile", "mlp", "-o", "m.egc", "--repeats", "1", cwd=tmp_path).returncode == 0
    r = egc("run", "m.egc", "--random", "--repeats", "50", "--warmup", "2", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    lat = report["latency"]
    assert lat["runs"] == 50 and lat["warmup"] == 2 and lat["threads"] == report["threads"] >= 1
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["throughput_per_s"] == pytest.approx(1 / lat["mean"])
    assert report["outputs"] == {"output": {"dtype": "float32", "shape": [64, 10]}}
    # no inputs and no --random: say how to give them (not the executable's own wording)
    bare = egc("run", "m.egc", "--repeats", "10", cwd=tmp_path)
    assert bare.returncode == 2 and "--input NAME=FILE.npy" in bare.stderr
    assert "--random" in bare.stderr and "x: Tensor[(64, 784), float32]" in bare.stderr
    r = egc("run", "m.egc", "--random", "--duration", "0.2", cwd=tmp_path)
    assert r.returncode == 0 and "latency over" in r.stdout and "p99" in r.stdout
    r = egc("run", "m.egc", "--random", "--duration", "-1", cwd=tmp_path)
    assert r.returncode == 2 and "positive number of seconds" in r.stderr


def test_profile_top_totals_and_a_chrome_trace(tmp_path: Path) -> None:
    """--top N keeps the N slowest rows, a table by kind of kernel and a total follow, and
    --trace writes the Chrome trace format: complete events in run order, back to back."""
    assert egc("compile", "cnn", "-o", "c.egc", "--repeats", "1", cwd=tmp_path).returncode == 0
    r = egc(
        "run", "c.egc", "--random", "--profile", "--top", "2", "--trace", "t.json", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert "slowest 2 of 4" in r.stdout and "time by kind of kernel" in r.stdout
    assert "conv/direct conv2d" in r.stdout and "in 4 kernels" in r.stdout
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert [e["ph"] for e in events] == ["X"] * 4
    assert events[0]["name"].startswith("k1_") and events[0]["args"]["shape"] == [1, 16, 64, 64]
    for before, after in itertools.pairwise(events):
        assert after["ts"] == pytest.approx(before["ts"] + before["dur"])


def test_an_unwritable_output_is_refused_before_compiling(tmp_path: Path) -> None:
    r = egc("compile", "mlp", "-o", str(tmp_path / "no" / "such" / "m.egc"))
    assert r.returncode == 2 and "cannot write (no folder" in r.stderr
    assert "optimising" not in r.stderr and "Traceback" not in r.stderr
    r = egc("compile", "mlp", "--trace", str(tmp_path))
    assert r.returncode == 2 and "(a folder)" in r.stderr


def test_a_symbolic_model_compiles_without_shapes_and_runs_at_any_dim(tmp_path: Path) -> None:
    """egc compile keeps size variables (no --shape), checks and reports at --dim sizes;
    egc run --random --dim runs the saved program at other sizes."""
    from onnx import helper, save

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["r", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", 1, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", 1, None)],
    )  # fmt: skip
    model = tmp_path / "dyn.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    out = tmp_path / "dyn.egc"
    r = egc("compile", str(model), "--check", "--dim", "seq=5", "--no-cache", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "input %x: Tensor[(batch, seq, 8), float32]" in r.stdout
    assert "compiled, checked and measured at batch=1, seq=5 (--dim)" in r.stdout
    assert "onnxruntime" in r.stdout and "result: ok" in r.stdout
    r = egc("run", str(out), "--random", "--dim", "batch=3", "--dim", "seq=2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outputs"]["y"]["shape"] == [3, 2, 8]
    r = egc("run", str(out), "--random", "--dim", "seq=-1")
    assert r.returncode == 2 and "NAME=N or NAME=LOW..HIGH with non-negative" in r.stderr
    # a range: the bounds the program is built with, checked at the upper one
    args = ("compile", str(model), "--check", "--dim", "seq=2..6", "--no-cache", "-o", str(out))
    r = egc(*args)
    assert r.returncode == 0, r.stderr
    assert "measured at batch=1, seq=6 (--dim)" in r.stdout
    r = egc("run", str(out), "--random", "--dim", "seq=7")
    assert r.returncode != 0 and "size seq is 7 here, outside its bounds 2..6" in r.stderr
