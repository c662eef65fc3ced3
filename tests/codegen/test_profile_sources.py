"""Profiles name the model's nodes: ONNX node names survive import, rewriting by the
e-graph (a batch norm absorbed into a convolution, a layer norm spelled out in five ops),
fusion, saving and loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.plan.graph import KernelNode
from egraph_ir.visitor import post_order

onnx = pytest.importorskip("onnx")


def _model() -> object:
    """Conv -> BatchNormalization -> Relu -> GlobalAveragePool -> Flatten -> LayerNorm."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)

    def const(name: str, value: np.ndarray) -> object:
        return numpy_helper.from_array(value.astype(np.float32), name)

    inits = [
        const("w", rng.standard_normal((8, 3, 3, 3))),
        const("gamma", rng.uniform(0.5, 1.5, 8)),
        const("beta", rng.standard_normal(8)),
        const("mean", rng.standard_normal(8)),
        const("var", rng.uniform(0.5, 1.5, 8)),
        const("ln_scale", rng.uniform(0.5, 1.5, 8)),
        const("ln_bias", rng.standard_normal(8)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="block/conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["b"], name="block/bn"
        ),
        helper.make_node("Relu", ["b"], ["r"], name="block/relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="head/pool"),
        helper.make_node("Flatten", ["g"], ["f"], name="head/flatten"),
        helper.make_node(
            "LayerNormalization", ["f", "ln_scale", "ln_bias"], ["y"], name="head/norm"
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "named",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_import_names_every_call_after_its_node() -> None:
    mod = ir.frontend.from_onnx(_model())
    calls = [e for e in post_order(mod["main"].body) if isinstance(e, ir.Call)]
    assert calls and all(c.span is not None for c in calls)
    assert {c.span.name for c in calls if c.span} == {
        "block/conv", "block/bn", "block/relu", "head/pool", "head/flatten", "head/norm",
    }  # fmt: skip


@pytest.mark.parametrize("opt_level", [2, 3])  # 3 folds the batch norm into the weights
def test_kernels_keep_the_node_names_through_rewriting_fusion_and_saving(
    opt_level: int, tmp_path: Path
) -> None:
    with pm.PassContext(opt_level=opt_level):
        exe = codegen.build(_model())
    kernels = [n for n in exe.graph.nodes if isinstance(n, KernelNode)]
    assert kernels and all(k.sources for k in kernels), [(k.name, k.sources) for k in kernels]
    named = {name for k in kernels for name in k.sources}
    # the batch norm was folded into the convolution's weights, yet it is still named;
    # the layer norm became mean/subtract/... kernels, each still named after it
    assert {"block/conv", "block/bn", "head/norm"} <= named
    assert sum("head/norm" in k.sources for k in kernels) >= 1
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    profile = exe.profile({"x": x}, repeats=2)
    assert any(row[2].startswith("block/conv") for row in profile.rows())
    events = profile.trace()["traceEvents"]
    assert all(e["args"]["nodes"] for e in events)
    exe.save(str(tmp_path / "m.egc"))
    loaded = codegen.load(tmp_path / "m.egc")
    again = [n.sources for n in loaded.graph.nodes if isinstance(n, KernelNode)]
    assert again == [k.sources for k in kernels]
