"""rules.prove: sound rules proven, unsound ones refuted with a counterexample that the
interpreter confirms, the rest unknown with the reason; each op's encoding agrees with
its numpy reference on special values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rules
from egc.cli.main import main as egc_main
from egraph_ir.registry import get_op
from rules.sides import same_values
from rules.smt import FLOAT_BITS, Encoder, float_value

z3 = pytest.importorskip("z3")
DATA = Path(__file__).resolve().parents[1] / "data"
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 65504.0, 1e-8, np.inf, -np.inf, np.nan]


def _encoded(op: str, values: list, dtype: str) -> np.ndarray:
    """The op's encoding evaluated by z3 on concrete values."""
    enc = Encoder(z3, {}, {}, real=False)
    args = [enc.constant(float(v) if dtype in FLOAT_BITS else int(v), dtype) for v in values]
    term = z3.simplify(enc.arithmetic(op, args, dtype))
    if dtype in FLOAT_BITS:
        return np.asarray(float_value(z3, term, dtype))
    return np.asarray(term.as_signed_long(), dtype)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["add", "subtract", "multiply", "divide", "maximum", "minimum"]),
    st.sampled_from(["float32", "float16"]),
    st.sampled_from(SPECIAL) | st.floats(-1e4, 1e4, width=16),
    st.sampled_from(SPECIAL) | st.floats(-1e4, 1e4, width=16),
)
def test_float_encodings_agree_with_the_references(op: str, dtype: str, a: float, b: float) -> None:
    """NaN, infinities, signed zeros and rounding as numpy's (maximum of two equal values
    is the second, -0.0 and 0.0 included)."""
    values = [np.asarray(a, dtype), np.asarray(b, dtype)]
    with np.errstate(all="ignore"):
        want = np.asarray(get_op(op).evaluate(values, {}))
    assert same_values(_encoded(op, values, dtype), want, nsz=False), (op, values, want)


@pytest.mark.parametrize("op", ["negative", "abs", "relu", "sqrt"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_unary_float_encodings_agree_with_the_references(op: str, dtype: str) -> None:
    for v in SPECIAL:
        value = np.asarray(v, dtype)
        with np.errstate(all="ignore"):
            want = np.asarray(get_op(op).evaluate([value], {}))
        assert same_values(_encoded(op, [value], dtype), want, nsz=False), (op, v)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum", "minimum"])
def test_integer_encodings_wrap_as_numpy(op: str) -> None:
    for a, b in [(127, 1), (-128, -1), (-128, 127), (100, 3), (0, -5)]:
        values = [np.asarray(a, "int8"), np.asarray(b, "int8")]
        with np.errstate(all="ignore"):
            want = np.asarray(get_op(op).evaluate(values, {}))
        assert same_values(_encoded(op, values, "int8"), want, nsz=False), (op, a, b)


@pytest.mark.parametrize(
    ("set_name", "rule"),
    [
        ("algebraic", "double-negative"),
        ("algebraic", "add-commute"),
        ("algebraic", "maximum-commute"),  # nsz: zeros compared without sign
        ("algebraic", "where-same-branches"),
        ("algebraic", "add-associate"),  # fast-math: over the reals
        ("cast", "cast-widen-narrow-half"),
        ("cast", "cast-cast-same"),  # the inner cast as any function
    ],
)
def test_sound_built_in_rules_are_proven(set_name: str, rule: str) -> None:
    result = rules.prove_rule(rules.builtin(set_name)[rule], timeout=20)
    assert result.status == "proven", result.reason


UNSOUND = rules.load(DATA / "unsound.rules")
ELEMENTWISE = [
    "times-zero-untagged", "sqrt-of-square", "log-of-exp-untagged", "add-reassociate-untagged",
    "divide-self-untagged", "subtract-commutes", "relu-commutes-with-negative",
    "cancel-then-divide", "max-is-left", "abs-is-identity", "add-zeros-like-keeps-x",
]  # fmt: skip


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_unsound_elementwise_rules_are_refuted_where_the_interpreter_agrees(name: str) -> None:
    """Each counterexample runs both sides in the interpreter, which must differ there
    (the reason quotes the two outputs)."""
    result = rules.prove_rule(UNSOUND[name], timeout=20)
    assert result.status == "refuted", result.reason
    assert result.counterexample and "left gives" in result.reason


def test_what_the_prover_does_not_model_is_unknown_with_the_reason() -> None:
    report = rules.prove(UNSOUND, timeout=5)
    assert (
        "conv2d is outside the prover's fragment"
        in report["conv2d-patches-transposed-windows"].reason
    )
    assert report["per-channel-without-output-scale"].status == "unknown"
    assert not any(r.status == "refuted" for r in rules.prove(rules.builtin("cast")).results)


def test_egc_rules_check_prove_exits_one_on_a_refuted_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.rules"
    path.write_text("rule keep-x [algebraic]\n    add(?x, 0) => ?x\n")
    status = egc_main(["rules", "check", str(path), "--prove", "--max-examples", "10"])
    out = capsys.readouterr().out
    assert status == 1
    assert "refuted  keep-x" in out and "left gives" in out
