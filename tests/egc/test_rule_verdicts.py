"""`egc rules list`: a verdict per rule (proven, tested, refuted), kept between runs and
checked again when the rule's text changes."""

from __future__ import annotations

from pathlib import Path

import pytest

import rules
from egc.cli.main import main as egc_main
from egc.rule_verdicts import verdicts

pytest.importorskip("z3")

MINE = """\
rule transpose-back [layout]
    transpose(transpose(?x, axes=[1, 0]), axes=[1, 0]) => ?x

rule keep-x [algebraic]
    add(?x, 0) => ?x

rule exp-then-log [algebraic, fast-math]
    log(exp(?x)) => ?x
"""


def test_each_rule_gets_proven_tested_or_refuted_and_the_verdict_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "mine.rules"
    path.write_text(MINE)
    store = tmp_path / "verdicts.json"
    before = verdicts(rules.load(path), check=False, store=store)
    assert {v.verdict for v in before} == {"not checked"}
    checked = {v.rule: v for v in verdicts(rules.load(path), check=True, store=store)}
    assert checked["transpose-back"].verdict == "proven"
    assert checked["keep-x"].verdict == "refuted"  # -0.0 + 0 is +0.0
    assert checked["exp-then-log"].verdict == "tested", checked["exp-then-log"].reason
    kept = {v.rule: v.verdict for v in verdicts(rules.load(path), check=False, store=store)}
    assert kept == {name: v.verdict for name, v in checked.items()}
    path.write_text(
        MINE.replace("add(?x, 0) => ?x", "add(?x, 0) => ?x\n    where dtype(?x) is int")
    )
    edited = {v.rule: v.verdict for v in verdicts(rules.load(path), check=False, store=store)}
    assert edited["keep-x"] == "not checked" and edited["transpose-back"] == "proven"


def test_egc_rules_list_prints_a_line_per_rule_and_exits_one_on_a_refuted_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.rules"
    path.write_text(MINE)
    assert egc_main(["rules", "list", str(path)]) == 0  # nothing checked yet: nothing refuted
    assert "3 not checked" in capsys.readouterr().out
    assert egc_main(["rules", "list", str(path), "--prove", "--max-examples", "20"]) == 1
    out = capsys.readouterr().out
    assert "transpose-back" in out and "proven" in out and "refuted" in out
    assert "1 proven, 1 tested, 1 refuted" in out
