"""Executables over several devices: one arena per device, copies between arenas, copy
statistics, the device sanitizer, devices this machine cannot run, and saved files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import models, op
from egraph_ir.errors import CodegenError
from egraph_ir.expr import Function
from egraph_ir.testing import assert_allclose

CPU0, CPU1 = ir.VirtualDevice("cpu", 0), ir.VirtualDevice("cpu", 1)
CHECKED = {"codegen.check_devices": True}


def sum_on_two_devices() -> ir.IRModule:
    """x [1024, 1024] on cpu:0, the result on cpu:1 (the issue's example)."""
    x = ir.var("x", shape=(1024, 1024))
    body = op.multiply(op.sum(op.exp(x), axis=1), ir.const(2.0))
    fn = Function([x], body, attrs={"virtual_device": CPU1, "param_virtual_devices": [CPU0]})
    return ir.IRModule.from_expr(fn)


def test_the_cheap_side_of_the_cut_is_copied() -> None:
    with pm.PassContext(config=CHECKED):
        exe = codegen.build(sum_on_two_devices())
    x = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
    assert_allclose(exe(x), 2 * np.exp(x).sum(axis=1))
    exe(x)
    assert exe.stats["copies_per_run"] == {("cpu:0", "cpu:1"): {"count": 1, "bytes": 4096}}
    assert exe.stats["copies"] == {("cpu:0", "cpu:1"): {"count": 2, "bytes": 8192}}
    assert exe.stats["runs"] == 2 and exe.stats["copy_bytes_per_run"] == 4096


def test_each_device_has_its_own_arena() -> None:
    exe = codegen.build(sum_on_two_devices())
    plan = exe.memory_plan
    per_device = plan.bytes_per_device
    assert set(per_device) == {"cpu:0", "cpu:1"}
    assert per_device == {"cpu:0": 4096, "cpu:1": 4096}  # the row sums, before and after
    assert sum(per_device.values()) == plan.bytes
    arenas = exe.runtime.arenas
    assert len(arenas) == 2
    for node in exe.graph.nodes:
        if node.id in plan.offsets:
            assert plan.device_of.get(node.id, 0) == exe.program.devices.of(node.id)
    assert '"devices": [\n  "cpu:1",\n  "cpu:0"\n ]' in exe.graph_json


def test_unplanned_modules_keep_one_arena() -> None:
    exe = codegen.build(models.mlp())
    assert exe.devices == ["cpu:0"] and len(exe.runtime.arenas) == 1
    assert exe.stats["copies_per_run"] == {}


def test_the_sanitizer_names_the_kernel_and_both_devices() -> None:
    with pm.PassContext(config=CHECKED):
        exe = codegen.build(sum_on_two_devices())
    x = np.ones((1024, 1024), np.float32)
    exe(x)  # clean
    rt, program = exe.runtime, exe.program
    cpu0, cpu1 = exe.devices.index("cpu:0"), exe.devices.index("cpu:1")
    victim = next(s for s, device, _ in program.arena_slots if device == cpu0)
    rt.slots[victim] = rt.bases[cpu1]  # point a cpu:0 kernel's buffer into cpu:1's arena
    with pytest.raises(CodegenError, match=r"kernel .* runs on cpu:0 .* lies in cpu:1"):
        exe(x)


def test_a_device_this_machine_lacks_is_refused_by_name() -> None:
    x = ir.var("x", shape=(4,))
    fn = Function([x], op.exp(op.on_device(op.negative(x), ir.VirtualDevice("cuda", 0))))
    planned = pm.passes.PlanDevices(default=CPU0)(ir.infer_type(ir.IRModule.from_expr(fn)))
    assert "cuda" in str(planned)  # planning for it works
    with pytest.raises(CodegenError, match="cannot run on device cuda:0"):
        codegen.build(fn)


def test_saved_executables_keep_their_devices(tmp_path: Path) -> None:
    exe = codegen.build(sum_on_two_devices())
    exe.save(str(tmp_path / "two.egc"))
    loaded = codegen.load(tmp_path / "two.egc")
    x = np.random.default_rng(1).random((1024, 1024), dtype=np.float32)
    np.testing.assert_array_equal(loaded(x), exe(x))
    assert loaded.devices == exe.devices
    assert loaded.memory_plan.bytes_per_device == exe.memory_plan.bytes_per_device
    assert loaded.stats["copies_per_run"] == exe.stats["copies_per_run"]


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_built_in_models_split_over_two_devices_match_the_interpreter(name: str) -> None:
    mod = models.get(name)
    fn = mod["main"]
    pinned = Function(
        fn.params,
        fn.body,
        fn.ret_type,
        fn.attrs.with_(virtual_device=CPU1, param_virtual_devices=[CPU0] * len(fn.params)),
    )
    mod = mod.with_function("main", pinned)
    inputs = models.example_inputs(name)
    with pm.PassContext(config=CHECKED):
        exe = codegen.build(mod)
    assert_allclose(exe(**inputs), ir.interpret(mod, **inputs))
    ((pair, traffic),) = exe.stats["copies_per_run"].items()
    assert pair == ("cpu:0", "cpu:1")
    smallest = min(
        [t.nbytes for p in fn.params for t in [p.checked_type]] + [exe.output_types[0].nbytes]  # type: ignore[attr-defined]
    )
    assert traffic["bytes"] <= smallest  # never more than the cheaper end moves


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_tiny2", "lstm1"])
def test_real_models_split_over_two_devices_agree_and_move_little(name: str, real_model) -> None:
    from egraph_ir.frontend import from_onnx

    path, data, expected = real_model(name)
    mod = ir.infer_type(from_onnx(path))
    fn = mod["main"]
    attrs = fn.attrs.with_(virtual_device=CPU1, param_virtual_devices=[CPU0] * len(fn.params))
    mod = mod.with_function("main", Function(fn.params, fn.body, fn.ret_type, attrs))
    with pm.PassContext(opt_level=3, config=CHECKED):
        exe = codegen.build(mod)
    out = exe(**data)
    out = out[0] if isinstance(out, tuple) else out
    scale = float(np.abs(expected).max())  # as in test_real_models: float32 sums, 1e-4
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * scale)
    moved = exe.stats["copy_bytes_per_run"]
    inputs = sum(v.nbytes for v in data.values())
    assert 0 < moved <= min(inputs, out.nbytes)  # never more than either end would move


def test_a_device_over_its_memory_budget_fails_naming_it() -> None:
    """codegen.memory_budget = {device: bytes}: a plan over it is an error naming the
    device, its need and its budget, before any code is emitted; a device the program does
    not use is named as a typo."""
    mod = sum_on_two_devices()
    with pm.PassContext(config=CHECKED):
        used = codegen.build(mod).memory_plan.bytes_per_device
    assert used["cpu:0"] > 0
    for device in used:
        budget = {device: used[device]}
        with pm.PassContext(config={**CHECKED, "codegen.memory_budget": budget}):
            codegen.build(mod)  # exactly enough
        low = {device: max(used[device] - 1, 0)}
        if used[device] == 0:
            continue
        with (
            pm.PassContext(config={"codegen.memory_budget": low}),
            pytest.raises(CodegenError, match=f"device {device} needs {used[device]:,} bytes"),
        ):
            codegen.build(mod)
    with (
        pm.PassContext(config={"codegen.memory_budget": {"cpu:7": 10}}),
        pytest.raises(CodegenError, match=r"names device\(s\) \['cpu:7'\]"),
    ):
        codegen.build(mod)
