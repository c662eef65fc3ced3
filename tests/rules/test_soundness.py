"""rules.check_soundness: every built-in rule passes, every deliberately wrong rule is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

import rules

DATA = Path(__file__).resolve().parents[1] / "data"
BUILTIN = [(name, rule) for name in rules.builtin_names() for rule in rules.builtin(name)]
UNSOUND = rules.load(DATA / "unsound.rules")


@pytest.mark.parametrize("rule", [r for _, r in BUILTIN], ids=[f"{s}:{r.name}" for s, r in BUILTIN])
def test_every_built_in_rule_is_sound(rule: rules.Rule) -> None:
    report = rules.check_soundness(rule)
    assert report.ok, str(report)
    assert rule.name not in report.unchecked, str(report)  # bindings could be made for it


@pytest.mark.parametrize("rule", list(UNSOUND), ids=UNSOUND.names)
def test_every_deliberately_wrong_rule_is_reported(rule: rules.Rule) -> None:
    report = rules.check_soundness(rule)
    assert not report.ok
    [failure] = report.failures
    text = str(failure)
    assert failure.rule == rule.name and f"unsound.rules:{rule.span.line}" in text
    assert failure.bindings and ("left gives" in text or "type" in failure.problem)


def test_there_are_at_least_ten_wrong_rules_and_the_report_is_reproducible() -> None:
    assert len(UNSOUND) >= 10
    first = rules.check_soundness(UNSOUND["sqrt-of-square"], max_examples=20, seed=7)
    second = rules.check_soundness(UNSOUND["sqrt-of-square"], max_examples=20, seed=7)
    assert str(first) == str(second)


def test_fast_math_rules_hold_for_finite_values_but_not_for_all_floats() -> None:
    rule = rules.builtin("algebraic")["multiply-zero"]
    assert rules.FAST_MATH in rule.tags
    assert rules.check_soundness(rule).ok
    untagged = rules.parse(
        "rule multiply-zero-exact [algebraic]\n    multiply(?x, 0) => zeros_like(?x)"
    )
    report = rules.check_soundness(untagged, max_examples=200)
    assert not report.ok
    problem = report.failures[0].problem.lower()
    assert "nan" in problem or "inf" in problem or "sign of a zero" in problem


def test_a_rule_no_binding_fits_is_reported_as_unchecked() -> None:
    impossible = rules.parse(
        "rule never [t]\n    negative(?x) => ?x\n    where rank(?x) == 2\n    where rank(?x) == 3"
    )
    report = rules.check_soundness(impossible, max_examples=5)
    assert report.ok and "never" in report.unchecked


def test_reports_show_drawn_attributes_and_the_tolerance() -> None:
    wrong = rules.parse_rules("rule s [algebraic]\n    sum(?x) => max(?x)\n", "s.rules")
    text = str(rules.check_soundness(wrong, max_examples=30))
    assert "sum.axis = " in text and "(not written in the rule: drawn)" in text
    near = rules.parse_rules(
        "rule n [algebraic]\n    multiply(?x, 0.5f) => divide(?x, 2.0001f)\n", "n.rules"
    )
    text = str(rules.check_soundness(near, max_examples=30))
    assert "tolerance rtol=" in text and "relative)" in text


def test_signed_zeros_count_unless_the_rule_says_nsz() -> None:
    """-0.0 and +0.0 used to compare equal, so rules wrong only in a zero's sign passed;
    a rule tagged nsz is checked without the sign and runs only under fast-math."""
    text = "rule keep-x [algebraic{tag}]\n    add(?x, zeros_like(?x)) => ?x"
    plain = rules.check_soundness(rules.parse(text.format(tag="")), max_examples=200)
    assert not plain.ok and "sign" in plain.failures[0].problem
    nsz = rules.parse(text.format(tag=", nsz"))
    assert rules.check_soundness(nsz, max_examples=200).ok
    assert not list(nsz.enabled(fast_math=False)) and list(nsz.enabled(fast_math=True))


def test_a_right_side_that_does_not_type_in_bfloat16_is_reported() -> None:
    """l2_normalize takes bfloat16, sum and multiply do not: unguarded, the decomposition
    is ill-typed there (the e-graph refused it at every use); `dtype(?x) is arithmetic`
    is the guard that says so. Random draws seldom pick bfloat16; the typing sweep does."""
    rule = (
        "rule l2 [fast-math]\n"
        "    l2_normalize(?x, eps=?e, axis=?a) => "
        "divide(?x, sqrt(maximum(sum(multiply(?x, ?x), axis=?a, keepdims=True), ?e)))\n"
    )
    report = rules.check_soundness(rules.parse(rule), max_examples=5)
    assert [f.rule for f in report.failures] == ["l2"]
    assert "ill-typed in bfloat16" in report.failures[0].problem
    guarded = rules.parse(rule + "    where dtype(?x) is arithmetic\n")
    assert rules.check_soundness(guarded, max_examples=5).ok
