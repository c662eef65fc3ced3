"""eqsat.attribution: each applied rule's share of an EqSat pass's cost change, from a
saturation without it; `egc compile --report` lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

import egraph_ir as ir
import passmgr as pm
import rules
from egc.cli.main import main as egc_main
from egraph_ir import op

RULES = rules.parse("""
rule double-negative [algebraic]
    negative(negative(?x)) => ?x

rule negative-as-multiply [algebraic]
    negative(?x) => multiply(?x, -1)

rule add-commute [algebraic]
    add(?a, ?b) => add(?b, ?a)
""")


def _report(mod: ir.IRModule, rule_set: rules.RuleSet) -> pm.passes.EqSatReport:
    with pm.PassContext(config={"eqsat.attribution": True}) as ctx:
        pm.passes.EqSat(rules=rule_set)(mod)
    report = ctx.run.last("EqSat", pm.passes.EqSatReport)
    assert report is not None
    return report


def test_the_rule_that_removes_the_work_carries_the_whole_change() -> None:
    x = ir.var("x", shape=(64, 64), dtype="float32")
    y = ir.var("y", shape=(64, 64), dtype="float32")
    body = op.add(op.negative(op.negative(x)), y)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x, y], body)))
    report = _report(mod, RULES)
    assert report.cost_after < report.cost_before
    assert report.attribution["double-negative"] == pytest.approx(1.0)
    assert report.attribution["add-commute"] == pytest.approx(0.0)  # applied, bought nothing
    assert report.matches["negative-as-multiply"] >= 2


def test_without_the_key_nothing_is_measured() -> None:
    x = ir.var("x", shape=(8,), dtype="float32")
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.negative(op.negative(x)))))
    with pm.PassContext() as ctx:
        pm.passes.EqSat(rules=RULES)(mod)
    assert ctx.run.last("EqSat", pm.passes.EqSatReport).attribution == {}


@pytest.mark.slow
def test_egc_compile_report_says_what_each_rule_bought_on_a_real_model(
    shared_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """BERT of ../shared/models/real at opt level 3: the layer-norm rules carry their passes'
    whole cost change."""
    model = shared_models / "real" / "bert_tiny2.onnx"
    assert egc_main(["compile", str(model), "--report", "--no-cache", "--opt-level", "3"]) == 0
    out = capsys.readouterr().out
    assert "layer-norm-last-axis: 5 matches, 5 applied, 100% of the cost change" in out
    assert "layer-norm-shifted-as-one-kernel: 5 matches, 5 applied, 100% of the cost change" in out
