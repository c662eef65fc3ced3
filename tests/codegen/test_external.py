"""External targets: partitioned modules built by codegen.build run their regions through
the targets' code generators (onnxruntime, blas, a user's), agree with the unpartitioned
build on the built-in and the real models, save and load, fall back to the host with a
warning when a code generator fails, and show up in reports and on the command line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.build import optimise
from egc.cli.main import main
from egraph_ir import models, op
from egraph_ir.frontend import from_onnx
from egraph_ir.testing import assert_allclose, programs

pytest.importorskip("onnxruntime")

REAL = ["resnet18", "mobilenet_v2", "bert_tiny2", "lstm1"]


def partitioned(mod: ir.IRModule, targets: list[str]) -> ir.IRModule:
    """The flow users run: optimise, then partition for the targets."""
    with pm.PassContext(opt_level=3):
        return pm.passes.partition_for(targets)(optimise(mod, None))


@pytest.mark.parametrize("targets", [["onnxruntime", "blas"], ["blas", "onnxruntime"], ["blas"]])
@pytest.mark.parametrize("name", models.NAMES)
def test_built_in_models_run_partitioned_and_agree(name: str, targets: list[str]) -> None:
    mod = models.get(name)
    inputs = models.example_inputs(name)
    part = partitioned(mod, targets)
    exe = codegen.build(part)
    regions = exe.regions()
    assert {r["target"] for r in regions} <= set(targets)
    if "onnxruntime" in targets:  # it supports every op: something always goes there
        assert regions
    if "blas" in targets and any(
        o in ("dense", "matmul", "batch_matmul") for r in regions for o in r["ops"]
    ):
        assert any(r["target"] == "blas" for r in regions)
    reference = codegen.build(mod)
    # the project's float32 tolerance (egraph_ir.compare) covers products summed in
    # another order by BLAS blocks or ONNX Runtime's kernels
    assert_allclose(exe(**inputs), reference(**inputs))


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_real_models_run_partitioned_and_agree(name: str, real_model) -> None:
    path, data, expected = real_model(name)
    mod = from_onnx(path)
    for targets in (["onnxruntime", "blas"], ["blas", "onnxruntime"]):
        exe = codegen.build(partitioned(mod, targets))
        assert exe.kernel_kinds().get("external")
        scale = float(np.abs(expected).max())  # as in test_real_models.py
        np.testing.assert_allclose(exe(**data), expected, rtol=1e-4, atol=1e-4 * scale)


def _mlp_partitioned() -> tuple[ir.IRModule, ir.IRModule, dict[str, np.ndarray]]:
    mod = models.get("mlp")
    return mod, partitioned(mod, ["onnxruntime", "blas"]), models.example_inputs("mlp")


def test_partitioned_executables_save_and_load(tmp_path: Path) -> None:
    _, part, inputs = _mlp_partitioned()
    exe = codegen.build(part)
    exe.save(tmp_path / "mlp.egc")
    loaded = codegen.load(tmp_path / "mlp.egc")
    assert [r["target"] for r in loaded.regions()] == [r["target"] for r in exe.regions()]
    np.testing.assert_array_equal(loaded(**inputs), exe(**inputs))


def _two_output_region() -> tuple[ir.IRModule, ir.IRModule]:
    x = ir.var("x", shape=(3, 4))
    a = op.exp(x)
    mod = ir.infer_type(
        ir.IRModule.from_expr(ir.Function([x], op.subtract(op.tanh(a), op.sigmoid(op.abs(a)))))
    )
    op.register_support("mine", "exp")
    op.register_support("mine", "abs")
    try:
        part = pm.passes.partition_for(["mine"])(mod)
    finally:
        op.unregister_support("mine")
    return mod, part


def test_a_users_code_generator_runs_multi_output_regions_in_place() -> None:
    mod, part = _two_output_region()
    seen: list[list[int]] = []

    def build_region(fn: ir.Function, threads: int):
        def run(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
            results = ir.interpret(fn, *inputs)
            results = results if isinstance(results, tuple) else (results,)
            seen.append([o.ctypes.data for o in outputs])
            for out, value in zip(outputs, results, strict=True):
                out[...] = value

        return run

    codegen.register_external("mine", build_region)
    try:
        exe = codegen.build(part)
    finally:
        codegen.register_external("mine", None)
    v = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    assert_allclose(exe(v), ir.interpret(mod, v))
    assert seen and len(seen[0]) == 2  # one buffer per output of the region


def test_a_failing_code_generator_hands_its_region_to_the_host() -> None:
    mod, part = _two_output_region()

    def refuse(fn: ir.Function, threads: int):
        raise RuntimeError("no such device")

    codegen.register_external("mine", refuse)
    try:
        with pytest.warns(
            codegen.ExternalFallbackWarning, match=r"@tvmgen_default_mine_main_0.*no such device"
        ):
            exe = codegen.build(part)
    finally:
        codegen.register_external("mine", None)
    assert "external" not in exe.kernel_kinds()
    v = np.linspace(-1, 1, 12, dtype="float32").reshape(3, 4)
    assert_allclose(exe(v), ir.interpret(mod, v))


def test_a_target_without_code_generator_runs_on_the_host_with_a_warning() -> None:
    mod, part = _two_output_region()
    with pytest.warns(
        codegen.ExternalFallbackWarning, match="no code generator for external target 'mine'"
    ):
        exe = codegen.build(part)
    v = np.ones((3, 4), "float32")
    assert_allclose(exe(v), ir.interpret(mod, v))


def test_onnxruntime_region_writes_into_the_given_buffers() -> None:
    from codegen.external import get_external

    x = ir.var("x", shape=(2, 5))
    fn = ir.infer_type(ir.Function([x], op.softmax(op.multiply(x, ir.const(2.0)))))
    run = get_external("onnxruntime")(fn, 1)
    v = np.arange(10, dtype="float32").reshape(2, 5)
    out = np.zeros((2, 5), "float32")
    run([v], [out])
    assert_allclose(out, ir.interpret(fn, v))


def test_blas_region_products_match_numpy_over_threads() -> None:
    from codegen.external import get_external

    rng = np.random.default_rng(1)
    a = ir.var("a", shape=(3, 96, 64))
    b = ir.const(rng.standard_normal((64, 80)).astype("float32"))
    fn = ir.infer_type(ir.Function([a], op.relu(op.matmul(a, b))))
    va = rng.standard_normal((3, 96, 64)).astype("float32")
    for threads in (1, 2):
        out = np.empty((3, 96, 80), "float32")
        get_external("blas")(fn, threads)([va], [out])
        # 64-term float32 dot products: relative 1e-5 covers the summation order
        np.testing.assert_allclose(out, np.maximum(va @ b.data, 0), rtol=1e-5, atol=1e-5)


def test_register_external_refuses_a_second_registration() -> None:
    with pytest.raises(ir.CodegenError, match="already registered"):
        codegen.register_external("blas", lambda fn, threads: None)


def test_cli_partitions_and_reports_regions(
    capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("EGC_COST_CACHE", str(tmp_path / "costs.json"))  # not the user's cache
    args = ["compile", "mlp", "--targets", "onnxruntime,blas", "--repeats", "1", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["regions"]
    assert {"name", "target", "ops", "inputs", "outputs"} <= set(report["regions"][0])
    placed = ["compile", "mlp", "--targets", "onnxruntime,blas", "--place", "--repeats", "1"]
    assert main([*placed, "--json"]) == 0  # by measured cost: agrees with the interpreter
    assert json.loads(capsys.readouterr().out)["ok"] and (tmp_path / "costs.json").exists()
    assert main(["compile", "mlp", "--targets", "onnxruntim"]) == 2
    assert "did you mean 'onnxruntime'" in capsys.readouterr().err


def test_unpartitioned_annotations_are_no_ops_for_the_host() -> None:
    x = ir.var("x", shape=(4,))
    mod = ir.IRModule.from_expr(
        ir.Function([x], op.compiler_end(op.relu(op.compiler_begin(x, compiler="t")), compiler="t"))
    )
    v = np.array([-1, 0, 1, 2], "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(codegen.build(mod)(v), np.maximum(v, 0))


def _interpreting_region(fn: ir.Function, threads: int):
    def run(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        codegen.write_outputs(outputs, ir.interpret(fn, *inputs))

    return run


@settings(max_examples=25)
@given(case=programs(max_nodes=8), data=st.data())
def test_partitioned_results_keep_their_nesting_on_random_partitionings(case, data) -> None:
    """A region (and main) returning nested tuples: the partitioned executable returns what
    the interpreter and the unpartitioned build return, `(a, (b, c))`, not `(a, b, c)`."""
    from egraph_ir.visitor import post_order

    fn = case.mod["main"]
    values = [e for e in post_order(fn.body) if isinstance(e, ir.Call)]
    assume(values)  # a program that only returns its input has nothing to place
    a, b, c = (data.draw(st.sampled_from(values)) for _ in range(3))
    nested = ir.infer_type(
        ir.IRModule.from_expr(ir.Function(fn.params, ir.Tuple([a, ir.Tuple([b, c])])))
    )
    names = sorted({e.op.name for e in values})
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    target = "nesting_mock"
    for name in chosen:
        op.register_support(target, name)
    codegen.register_external(target, _interpreting_region, override=True)
    try:
        part = pm.passes.partition_for([target])(nested)
        got = codegen.build(part)(**case.inputs)
    finally:
        op.unregister_support(target)
        codegen.register_external(target, None)
    expected = ir.interpret(nested, **case.inputs)
    assert_allclose(got, expected)
    assert_allclose(codegen.build(nested)(**case.inputs), expected)


def test_code_generators_get_their_targets_options(tmp_path: Path) -> None:
    """codegen.external_options = {target: {...}} reaches a generator that takes
    `options` (TVM's relay.ext.<target>.options), at build and again at load."""
    mod, part = _two_output_region()
    seen: list[dict] = []

    def build_region(fn: ir.Function, threads: int, options: dict):
        seen.append(options)
        return _interpreting_region(fn, threads)

    codegen.register_external("mine", build_region)
    try:
        config = {"codegen.external_options": {"mine": {"tile": 8}, "other": {"x": 1}}}
        with pm.PassContext(config=config):
            exe = codegen.build(part)
        exe.save(str(tmp_path / "m.egc"))
        loaded = codegen.load(tmp_path / "m.egc")
    finally:
        codegen.register_external("mine", None)
    assert seen == [{"tile": 8}, {"tile": 8}]
    v = np.random.default_rng(0).standard_normal((3, 4)).astype("float32")
    assert_allclose(loaded(v), ir.interpret(mod, v))
    with pytest.raises(ir.CompilerError, match="external_options"):
        pm.PassContext(config={"codegen.external_options": {"mine": 3}})
