"""Data-dependent If compiles: both branches native, the condition read at run time, each
branch with its own arena; nested, with tuple results, partitioned, saved and loaded, and
an ONNX If model against ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.testing import assert_allclose

PROGRAM = """def @main(%x: Tensor[(4, 8), float32], %y: Tensor[(8,), float32]) {
  %0 = sum(%x);
  %1 = greater(%0, 0f);
  %2 = exp(%y);
  %3 = if (%1) {
    %4 = mean(%x);
    %5 = greater(%4, 1f);
    if (%5) { (add(%x, %2), tanh(%x)) } else { (subtract(%x, %2), relu(%x)) }
  } else {
    (multiply(%x, %2), negative(%x))
  };
  %6 = %3.0;
  (%6, %3.1, %2)
}"""


def _inputs(scale: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": (rng.random((4, 8)) * scale).astype("float32"),
        "y": rng.standard_normal(8).astype("float32"),
    }


@pytest.mark.parametrize("scale", [3.0, 1.0, -1.0])  # outer then + inner then/else, else
def test_nested_ifs_with_tuple_results_compile_save_and_load(scale: float, tmp_path: Path) -> None:
    mod = ir.parse(PROGRAM)
    exe = codegen.build(mod)
    assert exe.kernel_kinds().get("external") == 1  # the If, as one kernel of main
    inputs = _inputs(scale)
    expected = ir.interpret(mod, **inputs)
    assert_allclose(exe.run(**inputs), expected)
    exe.save(str(tmp_path / "if.egc"))
    assert_allclose(codegen.load(tmp_path / "if.egc").run(**inputs), expected)


def test_an_if_with_partitioned_regions_in_its_branches() -> None:
    """Regions offloaded inside a branch travel with the branch and are built with it."""
    mod = ir.parse(PROGRAM)
    parted = pm.passes.partition_for(["onnxruntime"])(ir.infer_type(mod))
    assert any(f.attrs.get("Compiler") for f in parted.functions.values())
    exe = codegen.build(parted)
    for scale in (3.0, -1.0):
        inputs = _inputs(scale)
        assert_allclose(exe.run(**inputs), ir.interpret(mod, **inputs))


def test_an_onnx_if_whose_condition_depends_on_data_matches_onnxruntime(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    def branch(name: str, op_type: str) -> object:
        node = helper.make_node(op_type, ["x"], [f"{name}_out"])
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 3])
        return helper.make_graph([node], name, [], [out])

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
    ]
    nodes.append(
        helper.make_node(
            "If",
            ["positive"],
            ["y"],
            then_branch=branch("then", "Sqrt"),
            else_branch=branch("else", "Neg"),
        )
    )
    graph = helper.make_graph(
        nodes,
        "data_dependent_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "if.onnx"
    path.write_bytes(model.SerializeToString())
    exe = codegen.build(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for sign in (1.0, -1.0):
        x = (np.arange(6, dtype="float32").reshape(2, 3) + 1) * sign
        np.testing.assert_allclose(exe.run(x=x), session.run(None, {"x": x})[0], rtol=1e-6)


def test_if_results_feed_the_rest_of_the_program() -> None:
    x = ir.var("x", shape=(16,))
    flag = op.greater(op.max(x), ir.const(np.float32(0.5)))
    chosen = ir.If(flag, op.exp(x), op.sigmoid(x))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.multiply(chosen, x))))
    exe = codegen.build(mod)
    for value in (np.linspace(0, 1, 16), np.linspace(-1, 0, 16)):
        v = value.astype("float32")
        assert_allclose(exe.run(v), ir.interpret(mod, v))


def test_a_returned_closure_is_a_clear_error_before_and_after_plan_devices() -> None:
    """main returning a function got 'free variable %y' (or a KeyError once planned); a
    closure called inside main compiles (the inliner removes it)."""
    returned = ir.parse(
        "def @main(%x: Tensor[(4,), float32]) { fn (%y: Tensor[(4,), float32]) { add(%x, %y) } }"
    )
    planned = pm.passes.PlanDevices(default=ir.VirtualDevice("cpu", 0))(ir.infer_type(returned))
    for mod in (returned, planned):
        with pytest.raises(ir.CompilerError, match="main returns a function"):
            codegen.build(mod)
    called = ir.parse(
        "def @main(%x: Tensor[(4,), float32]) {\n"
        "  %f = fn (%y: Tensor[(4,), float32]) { add(%x, %y) };\n  %f(%x)\n}"
    )
    np.testing.assert_array_equal(codegen.build(called)(np.ones(4, "float32")), np.full(4, 2.0))


def test_higher_order_functions_reduce_to_data_flow_before_and_after_plan_devices() -> None:
    """reliability-4: a let-bound function returning a closure (`twice(sg)(p)`) raised a
    raw KeyError after PlanDevices ('free variable %twice' without it); closures known where
    they are made are reduced away (egraph_ir.inline.reduce_closures), so it compiles."""
    mod = ir.parse(
        """def @main(%p: Tensor[(2, 6), float32], %q: Tensor[(2, 6), float32]) {
    let %twice = fn (%u: fn(Tensor[(2, 6), float32]) -> Tensor[(2, 6), float32]) {
      fn (%b: Tensor[(2, 6), float32]) { %0 = %u(%b); %u(%0) } };
    let %sg = fn (%c: Tensor[(2, 6), float32]) { sigmoid(%c) };
    %1 = %twice(%sg);
    %2 = %1(%p);
    multiply(%2, %q)
  }"""
    )
    planned = pm.passes.PlanDevices(default=ir.VirtualDevice("cpu", 1))(ir.infer_type(mod))
    rng = np.random.default_rng(0)
    p, q = (rng.standard_normal((2, 6)).astype("float32") for _ in range(2))
    want = ir.interpret(mod, p, q)
    np.testing.assert_allclose(want, 1 / (1 + np.exp(-1 / (1 + np.exp(-p)))) * q, rtol=1e-6)
    for program in (mod, planned):
        exe = codegen.build(program)
        assert exe.kernel_kinds() == {"loops": 1}  # sigmoid(sigmoid(p)) * q, fused
        np.testing.assert_allclose(exe(p, q), want, rtol=1e-6, atol=1e-7)
