"""The rule language: parsing, validation errors with file:line:col, sets and tags."""

from __future__ import annotations

from pathlib import Path

import pytest

import egraph_ir as ir
import passmgr as pm
import rules
from egraph_ir import op
from egraph_ir.egraph import AttrVar, PCall, PGet, PLit, PVar

DATA = Path(__file__).resolve().parents[1] / "data"


def test_design_md_examples_parse() -> None:
    rs = rules.parse(
        """
# a comment
rule double-negative [algebraic]
    negative(negative(?x)) => ?x

rule matmul-assoc [algebraic, fast-math]
    matmul(matmul(?a, ?b), ?c) <=> matmul(?a, matmul(?b, ?c))

rule transpose-transpose [layout]
    transpose(transpose(?x, axes=?p), axes=?q) => ?x
    where compose(?p, ?q) == identity
""",
        "design.rules",
    )
    assert rs.names == ["double-negative", "matmul-assoc", "transpose-transpose"]
    tt = rs["transpose-transpose"]
    assert tt.lhs == PCall(
        "transpose",
        (PCall("transpose", (PVar("x"),), (("axes", AttrVar("p")),)),),
        (("axes", AttrVar("q")),),
    )
    assert tt.location == "design.rules:9:1" and tt.tags == ("layout",)
    assert len(rs["matmul-assoc"].rewrites()) == 2
    assert len(rs.by_tag("fast-math")) == 1
    assert rs.enabled(fast_math=False).names == ["double-negative", "transpose-transpose"]


def test_literals_tuple_fields_and_attribute_values() -> None:
    r = rules.parse("rule r [t]\n  batch_norm(?x, ?g, ?b, ?m, ?v, epsilon=?e).0 => add(?x, 1.5)")[
        "r"
    ]
    assert isinstance(r.lhs, PGet) and r.lhs.index == 0
    assert r.rhs == PCall("add", (PVar("x"), PLit(1.5)))
    r2 = rules.parse("rule r [t]\n  sum(?x, axis=[1, 2], keepdims=True) => ?x")["r"]
    assert dict(r2.lhs.attrs) == {"axis": (1, 2), "keepdims": True}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "rule a [t]\n    mutliply(?x, 1) => ?x",
            "bad.rules:2:5: unknown op 'mutliply' (did you mean 'multiply'?)",
        ),
        ("rule a [t]\n    add(?x) => ?x", "bad.rules:2:5: add takes 2 input(s) (lhs, rhs), got 1"),
        (
            "rule a [t]\n    sum(?x, axsi=1) => ?x",
            "bad.rules:2:13: sum has no attribute 'axsi' (did you mean 'axis'?)",
        ),
        (
            "rule a [t]\n    sum(?x, keepdims=3) => ?x",
            "bad.rules:2:22: sum: attribute 'keepdims' expects a bool",
        ),
        (
            "rule a [t]\n    negative(?x) => ?y",
            "bad.rules:2:21: ?y is not bound on the left-hand side",
        ),
        (
            "rule a [t]\n    negative(?x) => ?x\n    where rank(?z) == 1",
            "bad.rules:3:16: rank() takes a tensor variable",
        ),
        ("rule a [t]\n    negative(?x) => ?x\n    where ?x == 1", "bad.rules:3:11: ?x is a tensor"),
        (
            "rule a [t]\n    negative(?x) => ?x\n    where frob(?x)",
            "bad.rules:3:11: unknown guard function 'frob'",
        ),
        (
            "rule a [t]\n    negative(?x) => ?x\n    where dtype(?x) is fuzzy",
            "bad.rules:3:24: unknown dtype kind 'fuzzy'",
        ),
        (
            "rule a [t]\n    negative(?x) => ?x\nrule a [t]\n    exp(?x) => ?x",
            "bad.rules:3:6: duplicate rule name 'a' (first defined on line 1)",
        ),
        ("    negative(?x) => ?x", "bad.rules:1:5: expected 'rule NAME [TAGS]'"),
        ("rule a [t]\n    negative(?x) ?x", "bad.rules:2:18: expected '=>' or '<=>'"),
        (
            "rule a [t]\n    ?x => negative(?x)",
            "bad.rules:2:5: the left-hand side must be an op call",
        ),
        ("rule a [t]\n    negative(?x) <=> zeros_like(?y)", "bad.rules:2:33: ?y is not bound"),
        (
            "rule a [t]\n    add(?x, ?y) <=> negative(?x)",
            "bad.rules:2:17: '<=>' needs every variable on both sides; ?y",
        ),
        (
            "rule a [t]\n    transpose(?x, axes=?x) => ?x",
            "bad.rules:2:24: ?x is used both as a tensor and as an attribute",
        ),
        ("rule a [t]", "bad.rules:1:1: rule 'a' has no 'lhs => rhs' line"),
        (
            "rule a [t]\n    negative(?x) => ?x\n    exp(?x) => ?x",
            "bad.rules:3:5: rule 'a' already has a rewrite",
        ),
        ("rule a [t]\n    negative(?x) => ?x $", "bad.rules:2:24: unexpected character '$'"),
    ],
)
def test_errors_name_file_line_and_column(text: str, message: str) -> None:
    with pytest.raises(ir.RuleError) as info:
        rules.parse(text, "bad.rules")
    assert str(info.value).startswith(message), str(info.value)


def test_load_reports_the_file_and_combining_sets_checks_names() -> None:
    path = DATA / "bad_rules" / "unknown_op.rules"
    with pytest.raises(ir.RuleError, match=r"unknown_op.rules:5:10: unknown op 'mutliply'"):
        rules.load(path)
    with pytest.raises(ir.RuleError, match="cannot read rule file"):
        rules.load(DATA / "missing.rules")
    user = rules.load(DATA / "user_example.rules")
    assert user.names == ["exp-log-fast", "square-of-sqrt", "tanh-of-zero-scale"]
    with pytest.raises(ir.RuleError, match="duplicate rule name 'exp-log-fast'"):
        _ = user + user
    with pytest.raises(
        ir.RuleError, match=r"no built-in rule set 'algebraik' \(did you mean 'algebraic'\?\)"
    ):
        rules.builtin("algebraik")


def test_builtin_rule_files_hold_at_least_sixty_named_tagged_rules() -> None:
    total = [r for name in rules.builtin_names() for r in rules.builtin(name)]
    assert len(total) >= 60
    assert all(r.tags for r in total)
    names = [r.name for r in total]
    assert len(names) == len(set(names)), "rule names are unique across the built-in files"


def test_ir_text_literals_are_accepted_in_rules() -> None:
    text = (
        "rule half [algebraic]\n    multiply(?x, 0.5f) => divide(?x, 2f)\n"
        "rule plus-zero [algebraic]\n    add(?x, 0i64) => ?x\n"
    )
    half, plus_zero = list(rules.parse_rules(text, "lit.rules"))
    assert str(half.lhs.args[1]) == "PLit(value=0.5)"  # type: ignore[union-attr]
    assert str(plus_zero.lhs.args[1]) == "PLit(value=0.0)"  # type: ignore[union-attr]
    assert rules.check_soundness(half, max_examples=20).ok


@pytest.mark.parametrize("arrow", ["->", "-->", "==>"])
def test_a_wrong_arrow_gets_a_hint(arrow: str) -> None:
    text = f"rule r\n    negative(negative(?x)) {arrow} ?x\n"
    with pytest.raises(rules.RuleError, match=r"w.rules:2:28: .* write '=>' .* or '<=>'"):
        rules.parse_rules(text, "w.rules")


def test_unreadable_and_over_deep_rule_files_are_rule_errors(tmp_path: Path) -> None:
    latin = tmp_path / "latin.rules"
    latin.write_bytes("# caf\xe9\nrule a\n    negative(negative(?x)) => ?x\n".encode("latin-1"))
    with pytest.raises(rules.RuleError, match=r"latin.rules:1: not UTF-8 text"):
        rules.load(latin)
    deep = "rule a\n    transpose(?x, axes=" + "[" * 5000 + "0" + "]" * 5000 + ") => ?x\n"
    with pytest.raises(rules.RuleError, match="list nested deeper than 64 levels"):
        rules.parse_rules(deep, "deep.rules")
    guard = "rule a\n    negative(?x) => ?x\n    where " + "[" * 5000 + "1" + "]" * 5000 + " == 1\n"
    with pytest.raises(rules.RuleError, match="list nested deeper than 64 levels"):
        rules.parse_rules(guard, "guard.rules")


@pytest.mark.parametrize(
    ("guard", "message"),
    [
        ("shape(?x) < 3", "'<' needs number, got a tuple"),
        ("len(3) == 1", r"len\(\) needs tuple or str, got a number"),
        ("3 is float", "'is' .* needs str, got a number"),
        ('rank(?x) == "two"', "'==' compares a number with a str"),
        ("dim(?x, shape(?x)) == 1", r"dim\(\)'s index needs number"),
        ("rank(?x)", "a guard without a comparison needs bool"),
    ],
)
def test_ill_typed_guards_are_refused_at_load_time(guard: str, message: str) -> None:
    text = f"rule a\n    negative(negative(?x)) => ?x\n    where {guard}\n"
    with pytest.raises(rules.RuleError, match=rf"g.rules:3:\d+: {message}"):
        rules.parse_rules(text, "g.rules")


def test_well_typed_guards_still_load() -> None:
    text = (
        "rule a\n    negative(negative(?x)) => ?x\n    where rank(?x) >= 1\n"
        "    where dtype(?x) is float\n    where len(shape(?x)) == rank(?x)\n"
        "    where is_const(?x)\n    where dim(?x, 0) > 0\n"
    )
    assert len(list(rules.parse_rules(text, "ok.rules"))) == 1


def test_a_huge_tuple_index_is_refused() -> None:
    text = "rule a\n    split(?x, indices_or_sections=2).99999999999999999999 => ?x\n"
    with pytest.raises(rules.RuleError, match="out of range"):
        rules.parse_rules(text, "t.rules")


def test_an_attribute_that_may_be_a_tuple_cannot_be_a_scalar_constant() -> None:
    text = "rule a\n    sum(?x, axis=?a) => add(?x, ?a)\n"
    with pytest.raises(rules.RuleError, match=r"t.rules:2:33: \?a is bound to an attribute"):
        rules.parse_rules(text, "t.rules")
    scalar = "rule b\n    clip(?x, a_min=?lo, a_max=?hi) => maximum(?x, ?lo)\n"
    assert len(rules.parse_rules(scalar, "t.rules")) == 1


def test_a_right_hand_side_computes_attribute_values_from_the_match() -> None:
    """`newshape=[dim(?x, 0), -1]`: guard-language calls evaluated when the rule fires,
    here flattening every axis after the first, whatever the rank."""
    text = (
        "rule flatten-rest [layout]\n"
        "    flatten(?x, axis=1) => reshape(?x, newshape=[dim(?x, 0), div(size(?x), dim(?x, 0))])\n"
        "    where rank(?x) > 2\n"
    )
    rs = rules.parse(text, "c.rules")
    x = ir.var("x", shape=(2, 3, 4))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.flatten(x))))
    with pm.PassContext() as ctx:
        pm.passes.EqSat(rs, extractor="greedy", cost_model="nodes")(mod)
    run = ctx.run.last("EqSat")
    assert run.applied == {"flatten-rest": 1} and not run.refused  # (2, 12): the types agree
    report = rules.check_soundness(rs, max_examples=20)
    assert report.ok, report


@pytest.mark.parametrize(
    ("rewrite", "message"),
    [
        (
            "reshape(?x, newshape=[dim(?x, 0), -1]) => ?x",
            r"c.rules:2:\d+: 'dim\(...\)' computes a value: only a right-hand side",
        ),
        (
            "negative(?x) => reshape(?x, newshape=[dim(?y, 0), -1])",
            r"c.rules:2:\d+: dim\(\) takes a tensor variable bound on the left-hand side",
        ),
        (
            "negative(?x) => reshape(?x, newshape=[dtype(?x), -1])",
            r"c.rules:2:\d+: dtype\(\) gives a str, not a number",
        ),
        (
            "negative(?x) => reshape(?x, newshape=[mul(shape(?x), 2)])",
            r"c.rules:2:\d+: mul\(\) needs number, got a tuple",
        ),
    ],
)
def test_computed_attribute_values_are_checked_at_load_time(rewrite: str, message: str) -> None:
    with pytest.raises(rules.RuleError, match=message):
        rules.parse_rules(f"rule a [t]\n    {rewrite}\n", "c.rules")


def test_reshaped_resolves_the_inferred_axis() -> None:
    """reshape-identity holds for a newshape with -1 (what ONNX exports write)."""
    x = ir.var("x", shape=(1, 8, 6))
    body = op.relu(op.reshape(x, newshape=(1, 8, -1)))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], body)))
    out = pm.passes.EqSat("layout", extractor="greedy", cost_model="nodes")(mod)
    assert "reshape" not in str(out)
