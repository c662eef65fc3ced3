"""rules.explain names what kept a rule from firing, one way of failing per rule: an op
that is absent, an attribute value, a guard with the values it read (a dtype), a tag, a
limit that stopped saturation first, a type the rewrite would change; and, where it
fires, whether extraction kept it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import egraph_ir as ir
import rules
from egc.cli.main import main as egc_main
from egraph_ir import op
from egraph_ir.egraph import Limits

RULES = rules.parse("""
rule swap-back [layout]
    transpose(transpose(?x, axes=[1, 0]), axes=[1, 0]) => ?x

rule sub-as-add [algebraic]
    subtract(?a, ?b) => add(?a, negative(?b))
    where dtype(?a) is signed

rule half-only [algebraic]
    multiply(?x, 2) => add(?x, ?x)
    where dtype(?x) == float16

rule add-zero [algebraic, fast-math]
    add(?x, 0) => ?x

rule double-negative [algebraic]
    negative(negative(?x)) => ?x

rule neg-as-mul [algebraic]
    negative(?x) => multiply(?x, -1)

rule drop-broadcast [algebraic]
    add(?x, ?y) => ?x

rule log-of-exp [algebraic]
    log(exp(?x)) => ?x
""")


def _program() -> ir.IRModule:
    x = ir.var("x", shape=(2, 3, 4), dtype="float32")
    u = ir.var("u", shape=(4,), dtype="uint8")
    v = ir.var("v", shape=(4,), dtype="float32")
    w = ir.var("w", shape=(3, 4), dtype="float32")
    body = ir.Tuple([
        op.transpose(op.transpose(x, axes=(0, 2, 1)), axes=(0, 2, 1)),
        op.subtract(u, u),
        op.multiply(x, ir.const(np.float32(2))),
        op.add(x, ir.const(np.float32(0))),
        op.negative(op.negative(x)),
        op.add(v, w),
    ])  # fmt: skip
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x, u, v, w], body)))


@pytest.mark.parametrize(
    ("rule", "verdict", "detail"),
    [
        ("log-of-exp", "op log does not occur in the program", ""),
        ("swap-back", "none of the 2 place(s)", "attribute axes of transpose at the root is "
         "(0, 2, 1); the rule wants (1, 0)"),
        ("sub-as-add", "none of the 1 place(s)", "guard `dtype(?a) is signed` fails: ?a = %u "
         ": Tensor[(4,), uint8]"),
        ("half-only", "none of the 1 place(s)", "guard `dtype(?x) == float16` fails: ?x = %x "
         ": Tensor[(2, 3, 4), float32]"),
        ("add-zero", "kept off by its tag", "tagged fast-math"),
        ("drop-broadcast", "refused: the rewrite would change a type", ""),
        ("double-negative", "applied 1 time(s); extraction keeps it", ""),
        ("neg-as-mul", "lost in extraction: the cost model keeps the left side", ""),
    ],
)  # fmt: skip
def test_each_way_of_failing_is_named(rule: str, verdict: str, detail: str) -> None:
    explanation = rules.explain(RULES[rule], _program())
    text = str(explanation)
    assert verdict in explanation.verdict, text
    assert detail in text, text


def test_a_rule_starved_by_the_node_limit_says_so() -> None:
    """An `expensive` rule runs after the cheap phase; a node limit reached there leaves
    it unapplied although the program matches it."""
    xs = [ir.var(f"x{i}", shape=(4,), dtype="float32") for i in range(6)]
    total = xs[0]
    for v in xs[1:]:
        total = op.add(total, v)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function(xs, op.negative(op.negative(total)))))
    along = rules.parse("""
rule double-negative [algebraic, expensive]
    negative(negative(?x)) => ?x

rule add-commute [algebraic]
    add(?a, ?b) => add(?b, ?a)

rule add-assoc [algebraic]
    add(add(?a, ?b), ?c) => add(?a, add(?b, ?c))
""")
    explanation = rules.explain(along["double-negative"], mod, limits=Limits(nodes=60), along=along)
    assert explanation.verdict.startswith("not applied: saturation stopped first (e-node limit")
    assert any(s.matched for s in explanation.sites)


def test_egc_rules_explain_names_the_model_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.rules"
    path.write_text("rule scale-by-one [algebraic]\n    multiply(?x, 1) => ?x\n")
    assert egc_main(["rules", "explain", str(path), "scale-by-one", "transformer"]) == 0
    out = capsys.readouterr().out
    assert "rule scale-by-one" in out and "must be the constant 1.0" in out
    assert egc_main(["rules", "explain", str(path), "nope", "transformer"]) == 2
    assert "has no rule 'nope'; its rules: scale-by-one" in capsys.readouterr().err
