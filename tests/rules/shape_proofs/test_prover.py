"""rules.prove over symbolic shapes: rules that transpose, reshape, broadcast, concatenate,
convert layouts, reduce or multiply are proven for every shape up to a rank, or refuted
with a binding on which the interpreter runs both sides and sees them differ; guards are
read over unknown dims exactly as they read concrete ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rules
from egc.cli.main import main as egc_main
from egraph_ir.egraph.pattern import Match
from egraph_ir.expr import Constant
from egraph_ir.types import TensorType
from rules.shape_proofs.encoder import ANY_CONSTANT, Shaped
from rules.shape_proofs.guards import SymInt, condition
from rules.sides import evaluate_side, same_values

z3 = pytest.importorskip("z3")
DATA = Path(__file__).resolve().parents[2] / "data"

BUILT_IN = [
    ("layout", "transpose-transpose"),
    ("layout", "reshape-identity"),
    ("layout", "squeeze-expand-dims"),
    ("layout", "transpose-of-add-transposes"),
    ("layout", "matmul-to-dense"),
    ("layout", "bias-add-last-axis"),
    ("blocked", "unblock-after-bias-add"),
    ("blocked", "layout-round-trip"),
    ("fold_scale_axis", "scale-through-bias-add"),
]


@pytest.mark.parametrize(("set_name", "rule"), BUILT_IN)
def test_built_in_shape_rules_are_proven_for_every_shape(set_name: str, rule: str) -> None:
    result = rules.prove_rule(rules.builtin(set_name)[rule], timeout=20)
    assert result.status == "proven", result.reason
    assert "for every shape up to rank" in result.reason


SOUND = rules.parse(
    """
rule transpose-into-broadcast-add [layout]
    transpose(add(?a, ?b), axes=?p) => add(transpose(?a, axes=?p), transpose(?b, axes=?p))
    where rank(?a) == rank(?b)

rule squeeze-a-new-axis [layout]
    squeeze(expand_dims(?x, axis=0, num_newaxis=1), axis=[0]) => ?x

rule concatenate-then-transpose [layout]
    transpose(concatenate(?a, ?b, axis=0), axes=[1, 0]) => concatenate(transpose(?a, axes=[1, 0]), transpose(?b, axes=[1, 0]), axis=1)

rule flatten-is-a-reshape [layout]
    flatten(?x, axis=1) => reshape(?x, newshape=[dim(?x, 0), -1])
    where rank(?x) >= 1
""",
    "<sound>",
)


@pytest.mark.parametrize("name", SOUND.names)
def test_a_users_sound_shape_rules_are_proven(name: str) -> None:
    result = rules.prove_rule(SOUND[name], timeout=20)
    assert result.status == "proven", result.reason


UNSOUND = rules.parse(
    """
rule transpose-forgets-one-operand [layout]
    transpose(add(?a, ?b), axes=?p) => add(transpose(?a, axes=?p), ?b)

rule reshape-dropped [layout]
    reshape(?x, newshape=?s) => ?x

rule broadcast-dropped [layout]
    broadcast_to(?x, shape=?s) => ?x
    where rank(?x) == len(?s)

rule concatenate-swaps [layout]
    concatenate(?a, ?b, axis=0) => concatenate(?b, ?a, axis=0)

rule flatten-everything [layout]
    flatten(?x, axis=1) => reshape(?x, newshape=[-1])

rule mean-is-sum [algebraic]
    mean(?x, axis=[0], keepdims=True) => sum(?x, axis=[0], keepdims=True)

rule dense-is-matmul [layout]
    dense(?x, ?w) => matmul(?x, ?w)
    where rank(?x) == 2
""",
    "<unsound>",
)
FROM_FILE = [
    "transpose-twice-same-axes", "reshape-forgets-transpose", "sum-is-mean",
    "blocked-bias-transposed", "unblock-as-reshape",
]  # fmt: skip
HELD_OUT = [(UNSOUND, n) for n in UNSOUND.names] + [
    (rules.load(DATA / "unsound.rules"), n) for n in FROM_FILE
]


@pytest.mark.parametrize(("ruleset", "name"), HELD_OUT, ids=[n for _, n in HELD_OUT])
def test_unsound_shape_rules_are_refuted_with_a_binding_that_differs(
    ruleset: rules.RuleSet, name: str
) -> None:
    """The test runs the counterexample itself: both sides in the interpreter, on the
    arrays and attribute values the prover gives, must differ (or the right side be
    ill-typed there)."""
    rule = ruleset[name]
    result = rules.prove_rule(rule, timeout=20)
    assert result.status == "refuted", result.reason
    arrays = {k: v for k, v in result.counterexample.items() if isinstance(v, np.ndarray)}
    attrs = {k: v for k, v in result.counterexample.items() if k not in arrays}
    assert arrays, result.counterexample
    if "ill-typed" in result.reason:
        return
    consts = {k: Constant(v) for k, v in arrays.items()}
    dtype = str(next(iter(arrays.values())).dtype)
    explicit = {k: v for k, v in attrs.items() if " of " not in k}  # named in the rule
    if len(explicit) < len(attrs):  # an attribute the left side leaves out: shown, not rerun
        assert " of " in result.reason
        return
    left = evaluate_side(rule.lhs, consts, attrs, dtype)
    right = evaluate_side(rule.rhs, consts, attrs, dtype)
    assert not same_values(left, right, nsz=False)


GUARDS = rules.parse(
    """
rule guarded [layout]
    add(?x, ?y) => add(?y, ?x)
    where rem(dim(?x, 1), 4) == 0
    where shape(?x) == reshaped(?x, [dim(?x, 0), -1])
    where size(?y) > dim(?x, 0)
    where shape(?y) != [dim(?x, 1), 1]
""",
    "<guards>",
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=2, max_size=2),
    st.lists(st.integers(1, 12), min_size=2, max_size=2),
)
def test_guards_read_over_unknown_dims_agree_with_the_concrete_guards(
    x: list[int], y: list[int]
) -> None:
    """Each guard's z3 condition, at drawn dims, is what the guard says on those shapes."""
    dims = {n: [z3.Int(f"{n}.{k}") for k in range(2)] for n in ("x", "y")}
    symbolic = Match(
        {n: Shaped(tuple(SymInt(d, 1) for d in ds), "float32") for n, ds in dims.items()},
        {},
        ANY_CONSTANT,
    )
    concrete = Match(
        {"x": TensorType(tuple(x), "float32"), "y": TensorType(tuple(y), "float32")}, {}, {}
    )
    at = list(zip(dims["x"] + dims["y"], [z3.IntVal(v) for v in x + y], strict=True))
    for guard in GUARDS["guarded"].guards:
        cond = condition(z3, lambda g=guard: g.evaluate(symbolic), guard.text)
        assert z3.is_true(z3.simplify(z3.substitute(cond, *at))) == guard(concrete), guard.text


def test_egc_rules_check_prove_proves_a_layout_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.rules"
    path.write_text(
        "rule transpose-back [layout]\n"
        "    transpose(transpose(?x, axes=[1, 2, 0]), axes=[2, 0, 1]) => ?x\n"
    )
    status = egc_main(["rules", "check", str(path), "--prove", "--max-examples", "10"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "proven" in out and "every shape" in out


def test_permutations_are_all_tried() -> None:
    """transpose-transpose holds for every pair whose composition is the identity (34
    rank and permutation choices up to rank 4); transposing twice by the same axes holds
    at ranks 0-2 (every permutation there is its own inverse), so its refutation must
    reach a permutation of order 3 or more."""
    result = rules.prove_rule(rules.builtin("layout")["transpose-transpose"], timeout=20)
    assert result.status == "proven" and "34 rank and attribute choices" in result.reason
    twice = rules.parse(
        "rule twice [layout]\n    transpose(transpose(?x, axes=?p), axes=?p) => ?x\n", "<t>"
    )["twice"]
    refuted = rules.prove_rule(twice, timeout=20)
    assert refuted.status == "refuted", refuted.reason
    p = refuted.counterexample["p"]
    assert tuple(p[i] for i in p) != tuple(range(len(p)))  # p twice is not the identity
