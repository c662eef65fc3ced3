"""DOT export of IR modules and saturated e-graphs, with their size guards."""

from __future__ import annotations

import pytest

import egraph_ir as ir
import rules
from egraph_ir.dot import module_to_dot
from egraph_ir.egraph import egraph_to_dot, optimize


def test_module_dot_has_a_box_per_call_and_edges() -> None:
    mod = ir.infer_type(ir.models.mlp())
    text = module_to_dot(mod)
    assert text.startswith("digraph module") and text.count("matmul\\n") == 3
    assert "->" in text
    with pytest.raises(ir.CompilerError, match="more than 5 nodes"):
        module_to_dot(mod, max_nodes=5)


def test_egraph_dot_draws_classes_and_refuses_large_graphs() -> None:
    mod = ir.parse(
        "def @main(%x: Tensor[(2, 3), float32]) { multiply(negative(negative(%x)), 2f) }"
    )
    result = optimize(mod["main"], rules.builtin("algebraic").enabled(False).rewrites())
    assert result.snapshot is not None
    text = egraph_to_dot(result.snapshot, root=result.root_class)
    assert "style=bold" in text and "negative" in text and "lhead=cluster_" in text
    with pytest.raises(ir.CompilerError, match="more than 3"):
        egraph_to_dot(result.snapshot, max_enodes=3)
