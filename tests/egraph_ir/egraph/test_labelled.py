"""Labelled extraction (egraph_ir/egraph/labelled.py): nodes and labels chosen together."""

from __future__ import annotations

import pytest

from egraph_ir.egraph.graph import ENode
from egraph_ir.egraph.labelled import LabelledProblem, labelled_extraction


def _problem(entry_into_b: float) -> LabelledProblem:
    leaf = ENode("leaf", (), (), "x")
    slow = ENode("slow", ("x",), (), "r")  # only label a
    fast = ENode("fast", ("x",), (), "r")  # cheap on b, but x must enter b
    return LabelledProblem(
        classes={"r": [slow, fast], "x": [leaf]},
        options={leaf: {"a": 0.0}, slow: {"a": 5.0}, fast: {"a": 6.0, "b": 1.0}},
        root="r",
        entry=lambda k, t: entry_into_b if t == "b" else 0.0,
        result=lambda t: 0.0,
        counted=frozenset({slow, fast}),
    )


@pytest.mark.parametrize(("entry", "want"), [(10.0, ("slow", "a")), (1.0, ("fast", "b"))])
def test_the_label_pays_for_the_value_entering_it(entry: float, want: tuple[str, str]) -> None:
    picked = labelled_extraction(_problem(entry), time_limit=5.0)
    assert picked is not None
    node, label = picked["r"]
    assert (node.ctor, label) == want
    assert picked["x"][1] == "a"
