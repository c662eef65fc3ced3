"""ONNX Loops whose trip count or condition depends on data: imported as a loop function
(`Loop=1`), interpreted, compiled (the body native, run step by step), nested, with an If
in the body, saved and loaded, against ONNX Runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir.errors import FrontendError
from egraph_ir.testing import assert_allclose

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

F = T.FLOAT


def _info(name: str, dtype: int, shape: list[int]) -> Any:
    return h.make_tensor_value_info(name, dtype, shape)


def while_model(scan: bool = False) -> Any:
    """x = 2x + b while the step is below M and sum(x) < limit (b and limit read from
    outside the body); with `scan`, each step's sum is also stacked."""
    nodes = [
        h.make_node("Mul", ["x_in", "two"], ["x2"]),
        h.make_node("Add", ["x2", "b"], ["x_out"]),
        h.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
        h.make_node("Less", ["s", "limit"], ["cond_out"]),
    ]
    outputs = [_info("cond_out", T.BOOL, []), _info("x_out", F, [2, 3])]
    if scan:
        outputs.append(_info("s", F, []))
    body = h.make_graph(
        nodes,
        "body",
        [_info("i", T.INT64, []), _info("cond_in", T.BOOL, []), _info("x_in", F, [2, 3])],
        outputs,
        [h.make_tensor("two", F, [], [2.0])],
    )
    loop_out = ["y", "sums"] if scan else ["y"]
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "c", "x0"], loop_out, body=body)],
        "while",
        [
            _info("M", T.INT64, []),
            _info("c", T.BOOL, []),
            _info("x0", F, [2, 3]),
            _info("b", F, [2, 3]),
            _info("limit", F, []),
        ],
        [_info("y", F, [2, 3])] + ([_info("sums", F, [None])] if scan else []),
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def nested_model() -> Any:
    """An outer loop of M steps whose body runs an inner loop of i steps (the outer step
    number: a trip count computed in the body) and an If on the running total."""
    inner = h.make_graph(
        [h.make_node("Add", ["acc_in", "x"], ["acc_out"]), h.make_node("Identity", ["c"], ["c2"])],
        "inner",
        [_info("j", T.INT64, []), _info("c", T.BOOL, []), _info("acc_in", F, [3])],
        [_info("c2", T.BOOL, []), _info("acc_out", F, [3])],
    )
    then = h.make_graph(
        [h.make_node("Sqrt", ["total"], ["t_out"])], "then", [], [_info("t_out", F, [3])]
    )
    other = h.make_graph(
        [h.make_node("Neg", ["total"], ["e_out"])], "else", [], [_info("e_out", F, [3])]
    )
    outer = h.make_graph(
        [
            h.make_node("Loop", ["i", "", "acc"], ["total"], body=inner),
            h.make_node("ReduceSum", ["total"], ["sum"], keepdims=0),
            h.make_node("Greater", ["sum", "zero"], ["positive"]),
            h.make_node("If", ["positive"], ["picked"], then_branch=then, else_branch=other),
            h.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "outer",
        [_info("i", T.INT64, []), _info("cond", T.BOOL, []), _info("acc", F, [3])],
        [_info("cond_out", T.BOOL, []), _info("picked", F, [3])],
        [h.make_tensor("zero", F, [], [0.0])],
    )
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "", "start"], ["y"], body=outer)],
        "nested",
        [_info("M", T.INT64, []), _info("start", F, [3]), _info("x", F, [3])],
        [_info("y", F, [3])],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def built_while() -> tuple[Any, Any, Any]:
    ort = pytest.importorskip("onnxruntime")
    model = while_model()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, codegen.build(model), session


@given(
    trips=st.integers(0, 40),
    go=st.booleans(),
    limit=st.sampled_from([-1.0, 5.0, 100.0, 1e4, 1e30]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=25, deadline=None)
def test_a_while_loop_matches_onnxruntime_for_any_trip_count_and_condition(
    built_while: tuple[Any, Any, Any], trips: int, go: bool, limit: float, seed: int
) -> None:
    """Exact equality: each step's arithmetic is two float32 operations on the same
    inputs, and the compiled body computes them in the same order."""
    model, exe, session = built_while
    rng = np.random.default_rng(seed)
    feeds = {
        "M": np.array(trips, np.int64),
        "c": np.array(go),
        "x0": rng.standard_normal((2, 3)).astype("float32"),
        "b": rng.random((2, 3)).astype("float32"),
        "limit": np.array(limit, np.float32),
    }
    expected = session.run(None, feeds)[0]
    np.testing.assert_array_equal(exe.run(**feeds), expected)
    np.testing.assert_array_equal(ir.interpret(ir.frontend.from_onnx(model), **feeds), expected)


def test_the_loop_is_a_function_that_prints_parses_and_survives_the_passes() -> None:
    mod = ir.frontend.from_onnx(while_model())
    loop = mod["onnx_loop_0"]
    assert loop.attrs.get("Loop") == 1 and len(loop.params) == 5  # i, cond, x, b, limit
    assert ir.structural_equal(ir.parse(str(mod)), mod)
    feeds = [np.array(7, np.int64), np.array(True), np.ones((2, 3), "float32")]
    feeds += [np.full((2, 3), 0.5, "float32"), np.array(1e3, np.float32)]
    with pm.PassContext(opt_level=3):
        optimised = pm.passes.FuseOps()(pm.passes.EqSat("algebraic")(mod))
    assert_allclose(ir.interpret(optimised, *feeds), ir.interpret(mod, *feeds))


def test_nested_loops_with_an_if_compile_save_and_load(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    model = nested_model()
    mod = ir.frontend.from_onnx(model)
    assert {"onnx_loop_0", "onnx_loop_1"} <= set(dict(mod.items()))
    exe = codegen.build(model)
    exe.save(str(tmp_path / "loops.egc"))
    loaded = codegen.load(tmp_path / "loops.egc")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for trips, sign in ((0, 1.0), (1, 1.0), (4, 1.0), (5, -1.0)):
        feeds = {
            "M": np.array(trips, np.int64),
            "start": rng.random(3).astype("float32"),
            "x": (rng.random(3) * sign).astype("float32"),
        }
        expected = session.run(None, feeds)[0]
        assert_allclose(exe.run(**feeds), expected)
        assert_allclose(loaded.run(**feeds), expected)


def test_a_shape_changing_state_and_data_dependent_scan_outputs_are_clear_errors() -> None:
    with pytest.raises(FrontendError, match="scan outputs, whose length"):
        model = while_model(scan=True)
        model.graph.node[0].input[0] = ""  # no trip count: the body's condition decides
        model.graph.node[0].input[1] = ""
        ir.frontend.from_onnx(model)
    model = while_model()
    body = model.graph.node[0].attribute[0].g
    body.node.append(h.make_node("Concat", ["x_out", "x_out"], ["grown"], axis=0))
    body.output[1].name = "grown"
    with pytest.raises(FrontendError, match=r"loop-carried value 0 \('x_in'\) changes from"):
        ir.frontend.from_onnx(model)
