"""Saved executables: one file, loaded and run in a fresh process without compiling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import models, op
from egraph_ir.errors import CodegenError

ROOT = Path(__file__).resolve().parents[3]

LOAD_AND_RUN = """
import sys, time, numpy as np
import codegen
stages = []
sys.modules["codegen.build"].optimise = lambda *a, **k: stages.append("optimise")  # not called
import codegen.llvm.jit as jit
jit.optimise = lambda *a, **k: stages.append("llvm")  # nor LLVM's optimiser
exe = codegen.load(sys.argv[1])
inputs = dict(np.load(sys.argv[2]))
out = exe(**inputs)
out = out if isinstance(out, tuple) else (out,)
np.savez(sys.argv[3], *out)
assert not stages, stages
print(repr(exe))
"""


def run_in_fresh_process(path: Path, inputs: dict[str, np.ndarray], tmp: Path) -> list[np.ndarray]:
    np.savez(tmp / "in.npz", **inputs)
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, str(path), str(tmp / "in.npz"), str(tmp / "o.npz")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "<Executable" in result.stdout
    data = np.load(tmp / "o.npz")
    return [data[f"arr_{k}"] for k in range(len(data.files))]


@pytest.mark.parametrize("name", models.NAMES)
def test_saved_models_run_in_another_process_with_the_same_outputs(
    name: str, tmp_path: Path
) -> None:
    with pm.PassContext(opt_level=3):
        exe = codegen.build(models.get(name))
    inputs = models.example_inputs(name)
    expected = exe(**inputs)
    path = tmp_path / f"{name}.egc"
    exe.save(str(path))
    got = run_in_fresh_process(path, inputs, tmp_path)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)  # the same machine code: bit for bit


def test_saved_file_holds_object_code_constants_and_cpu_features(tmp_path: Path) -> None:
    exe = codegen.build(models.cnn())
    exe.save(str(tmp_path / "cnn.egc"))
    with zipfile.ZipFile(tmp_path / "cnn.egc") as zf:
        names = zf.namelist()
        manifest = json.loads(zf.read("manifest.json"))
    assert "program.json" in names and any(n.startswith("code/") for n in names)
    assert any(n.startswith("constants/") for n in names)
    assert manifest["format"] == 5 and manifest["features"] and manifest["triple"]
    assert set(manifest["digests"]) == set(names) - {"manifest.json"}
    loaded = codegen.load(tmp_path / "cnn.egc")
    assert loaded.kernel_kinds() == exe.kernel_kinds()
    assert loaded.memory_plan.bytes == exe.memory_plan.bytes
    assert loaded.optimized_module is None and loaded.get_source() == exe.get_source()


def test_host_kernels_and_tuple_outputs_survive_saving(tmp_path: Path) -> None:
    x = ir.var("x", shape=(4, 6))
    g, b = ir.const(np.ones(6, "float32")), ir.const(np.zeros(6, "float32"))
    norm = op.group_norm(op.expand_dims(x, axis=0), ir.const(np.ones(4, "float32")),
                         ir.const(np.zeros(4, "float32")), num_groups=2)  # fmt: skip
    fn = ir.Function([x], ir.Tuple([op.layer_norm(x, g, b), op.exp(norm)]))
    exe = codegen.build(ir.IRModule.from_expr(fn))
    assert "host" in exe.kernel_kinds()
    exe.save(tmp_path / "h.egc")
    loaded = codegen.load(tmp_path / "h.egc")
    data = np.random.default_rng(0).standard_normal((4, 6)).astype("float32")
    for a, e in zip(loaded(data), exe(data), strict=True):
        np.testing.assert_array_equal(a, e)
    assert loaded.output_names == ["output0", "output1"]


def test_loading_checks_format_and_cpu_features(tmp_path: Path) -> None:
    exe = codegen.build(models.mlp())
    path = tmp_path / "m.egc"
    exe.save(path)
    with zipfile.ZipFile(path) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(parts["manifest.json"])

    def rewrite(**changes: object) -> Path:
        out = tmp_path / "changed.egc"
        with zipfile.ZipFile(out, "w") as zf:
            for n, data in parts.items():
                zf.writestr(
                    n, json.dumps({**manifest, **changes}) if n == "manifest.json" else data
                )
        return out

    with pytest.raises(ir.CompilerError, match="lacks them; compile the model on this machine"):
        codegen.load(rewrite(features=[*manifest["features"], "imaginary-isa"]))
    with pytest.raises(ir.CompilerError, match="saved in format 99"):
        codegen.load(rewrite(format=99))
    with pytest.raises(ir.CompilerError, match="no such file"):
        codegen.load(tmp_path / "absent.egc")
    (tmp_path / "junk.egc").write_text("not a zip")
    with pytest.raises(ir.CompilerError, match="not a saved executable"):
        codegen.load(tmp_path / "junk.egc")
    with pytest.raises(ir.CompilerError, match="cannot write"):
        exe.save(tmp_path / "no" / "such" / "dir.egc")


def test_executable_call_repr_types_and_input_dtype_checks() -> None:
    exe = codegen.build(models.mlp())
    x = models.example_inputs("mlp")["x"]
    np.testing.assert_array_equal(exe(x), exe.run(x=x))
    text = repr(exe)
    assert "x: Tensor[(64, 784), float32]" in text and "kernels:" in text and "arena" in text
    assert str(exe.output_types[0]) == "Tensor[(64, 10), float32]"
    assert exe.output_names == ["output"]
    # exact casts are fine (integers, float64 holding float32 values); lossy ones are errors
    np.testing.assert_array_equal(exe(x.astype("float64")), exe(x))
    exe(np.zeros((64, 784), "int64"))
    with pytest.raises(
        ir.CompilerError, match="input 'x' is float64, expected float32, and casting"
    ):
        exe(x.astype("float64") + 1e-12)
    with pytest.raises(ir.CompilerError, match="has shape"):
        exe(np.zeros((2, 784), "float32"))
    with pytest.raises(ir.CompilerError, match="both by position and by name"):
        exe(x, x=x)


def test_profile_gives_spread_flops_and_shares() -> None:
    exe = codegen.build(models.cnn())
    prof = exe.profile(models.example_inputs("cnn"), repeats=5)
    assert len(prof) == sum(v for k, v in exe.kernel_kinds().items() if k != "alias")
    assert abs(sum(k.share for k in prof) - 1.0) < 1e-9
    conv = next(k for k in prof if k.kind == "conv")
    assert conv.flops > 1e6 and conv.bytes > 0 and conv.gflops_per_s > 0
    assert all(k.low <= k.seconds <= k.high for k in prof)
    table = str(prof)
    assert "GFLOP/s" in table and "conv2d" in table and "total" in table


def test_the_run_time_options_are_saved_and_can_change_at_load(tmp_path: Path) -> None:
    """BuildOptions travel in the file; threads (up to the compiled count) and the device
    check are the run-time half a load may override."""
    import passmgr as pm

    with pm.PassContext(config={"codegen.num_threads": 2, "codegen.memory_planner": "conflicts"}):
        exe = codegen.build(models.mlp())
    path = tmp_path / "mlp.egc"
    exe.save(str(path))
    x = models.example_inputs("mlp")
    same = codegen.load(path)
    assert same.options == exe.options and same.threads == 2
    assert same.options.memory_planner == "conflicts"
    one = codegen.load(path, threads=1, check_devices=True)
    assert one.threads == 1 and one.options.check_devices and len(one.runtime.workers) == 0
    np.testing.assert_array_equal(one.run(**x), exe.run(**x))
    with pytest.raises(ir.CodegenError, match="compiled for 2 thread"):
        codegen.load(path, threads=3)


def test_benchmark_times_the_runs_it_is_asked_for() -> None:
    exe = codegen.build(models.mlp())
    inputs = models.example_inputs("mlp")
    lat = exe.benchmark(inputs, repeats=7, warmup=1)
    assert lat.runs == 7 and lat.warmup == 1 and lat.threads == exe.threads
    assert lat.min <= lat.p50 <= lat.p90 <= lat.p99 <= lat.max and lat.throughput > 0
    assert "latency over 7 runs" in str(lat)
    assert exe.benchmark(inputs, duration=0.05, warmup=0).runs >= 1
    with pytest.raises(ir.CompilerError, match="benchmark"):
        exe.benchmark(inputs, repeats=0)


def test_results_by_name_feeds_as_a_dict_and_threads_chosen_at_run_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_dict` names every output (nested tuples flattened), `run` takes one dict of
    feeds like ONNX Runtime, the thread count is set at load (argument or EGC_NUM_THREADS)
    or later with `set_threads`, and a loaded executable saves again."""
    mod = ir.parse(
        "def @main(%x: Tensor[(64, 64), float32], %y: Tensor[(64, 64), float32]) {\n"
        "  (matmul(%x, %y), (relu(%x), exp(%y)))\n}"
    )
    x, y = (np.random.default_rng(k).standard_normal((64, 64), "float32") for k in (0, 1))
    with pm.PassContext(config={"codegen.num_threads": 2}):
        exe = codegen.build(mod)
    by_name = exe.run_dict(x=x, y=y)
    assert list(by_name) == ["output0", "output1", "output2"]
    np.testing.assert_array_equal(by_name["output1"], np.maximum(x, 0))
    first = exe.run({"x": x, "y": y})
    assert isinstance(first[1], tuple)  # run keeps the function's nesting
    np.testing.assert_array_equal(first[0], by_name["output0"])
    exe.set_threads(1)
    assert exe.threads == 1
    np.testing.assert_allclose(exe.run(x, y)[0], by_name["output0"], rtol=1e-5, atol=1e-5)
    with pytest.raises(CodegenError, match="compiled for 2"):
        exe.set_threads(3)
    exe.save(str(tmp_path / "m.egc"))
    monkeypatch.setenv("EGC_NUM_THREADS", "1")
    loaded = codegen.load(tmp_path / "m.egc")
    assert loaded.threads == 1
    loaded.save(str(tmp_path / "again.egc"))  # a loaded executable saves again
    again = codegen.load(tmp_path / "again.egc", threads=2)
    assert again.threads == min(2, os.cpu_count() or 1)
    np.testing.assert_array_equal(again.run_dict(x=x, y=y)["output2"], by_name["output2"])
    monkeypatch.setenv("EGC_NUM_THREADS", "many")
    with pytest.raises(CodegenError, match="EGC_NUM_THREADS"):
        codegen.load(tmp_path / "m.egc")
