"""The text format: golden prints, exact round trips and parse errors with line:col."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import egraph_ir as ir
from egraph_ir import models, op
from egraph_ir.testing import assert_structural_equal, programs


def test_print_is_relay_like() -> None:
    x = ir.var("x", shape=(1, 4))
    w = ir.const(np.arange(16, dtype="float32").reshape(4, 4))
    h = op.dense(x, w)
    f = ir.Function([x], op.add(op.relu(h), op.multiply(h, ir.const(0.5))))
    assert ir.IRModule.from_expr(f).astext(show_meta=False) == (
        "def @main(%x: Tensor[(1, 4), float32]) {\n"
        "  %0 = dense(%x, meta[Constant][0]);\n"
        "  %1 = relu(%0);\n"
        "  %2 = multiply(%0, 0.5f);\n"
        "  add(%1, %2)\n"
        "}\n"
        "// metadata omitted: 1 constant(s)"
    )


def test_parse_accepts_nested_calls_and_inline_tensors() -> None:
    mod = ir.parse("""
    // a comment
    def @main(%x: Tensor[(2,), float32]) {
      add(%x, multiply([1f, 2f], 3f))   /* trailing */
    }""")
    np.testing.assert_allclose(ir.interpret(mod, np.zeros(2, "float32")), [3, 6])


@pytest.mark.parametrize(
    "text",
    [
        "def @main(%x: Tensor[(2, 2), float64], %i: Tensor[(3,), int64]) {\n"
        '  %0 = take(%x, %i, axis=0, mode="wrap");\n  (%0, [[1i64, -2i64]], -0.0f, nanf, -inff, true)\n}',
        "def @main(%x: Tensor[(4, 6), float32]) {\n  %0 = split(%x, indices_or_sections=[1, 3], axis=1);\n"
        "  let %y: Tensor[(4, 1), float32] = %0.0;\n  %1 = fn (%z: Tensor[(4, 1), float32], Primitive=1) {\n"
        "    exp(%z)\n  };\n  %1(%y)\n}",
        "def @f(%a: float16) -> float16 {\n  negative(%a)\n}\n\ndef @main(%b: float16) {\n  @f(%b)\n}",
    ],
)
def test_round_trip_is_exact_and_prints_the_same_text(text: str) -> None:
    mod = ir.parse(text)
    assert str(mod) == text
    assert_structural_equal(ir.parse(str(mod)), mod)


@pytest.mark.parametrize("name", models.NAMES)
def test_built_in_models_round_trip_with_their_weights(name: str) -> None:
    mod = models.get(name)
    back = ir.parse(str(mod))
    assert_structural_equal(back, mod)
    x = models.example_inputs(name)
    if name != "elementwise":  # 4M elements: structural equality already covers it
        np.testing.assert_array_equal(ir.interpret(back, **x), ir.interpret(mod, **x))


@given(programs())
def test_random_programs_round_trip(case) -> None:
    text = str(case.mod)
    back = ir.parse(text)
    assert_structural_equal(back, case.mod)
    assert str(back) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "def @main(%x: float32) {\n  mutliply(%x, %x)\n}",
            "2:3: unknown op 'mutliply' (did you mean 'multiply'?)",
        ),
        ("def @main(%x: float32) {\n  add(%x, %y)\n}", "2:11: undefined variable %y"),
        ("def @main(%x: float32) {\n  add(%x, %x\n}", "3:1: expected ')'"),
        (
            "def @main(%x: Tensor[(2), floot32]) { %x }",
            "1:27: unknown dtype 'floot32' (did you mean 'float32'?)",
        ),
        ("def @main(%x: float32) { sum(%x, axis=1, axis=2) }", "attribute 'axis' given twice"),
        ("def @main(%x: float32) { sum(%x, bogus=1) }", "1:26: sum: unknown attribute 'bogus'"),
        (
            "def @main(%x: float32) { add(%x, meta[Constant][0]) }",
            "meta[Constant][0] is not defined; the text has no metadata",
        ),
        ("def @main(%x: float32) { add(%x, 1f) } $", "1:40: unexpected character '$'"),
        ("def @main(%x: float32) { add(%x, 300i8) }", "'300i8' is not a valid int8 literal"),
        ("def @main(%x: float32) { [[1f], [2f, 3f]] }", "not rectangular"),
        (
            "def @main(%x: float32) { %x }\ndef @main(%x: float32) { %x }",
            "2:5: function @main is defined twice",
        ),
    ],
)
def test_parse_errors_name_line_and_column(text: str, message: str) -> None:
    with pytest.raises(ir.ParseError) as info:
        ir.parse(text)
    assert message in str(info.value)


def test_too_deep_nesting_is_a_parse_error_not_a_recursion_error() -> None:
    text = "def @main(%x: float32) { " + "negative(" * 400 + "%x" + ")" * 400 + " }"
    with pytest.raises(ir.ParseError, match="nested deeper than"):
        ir.parse(text)


def test_names_are_made_unique_and_valid() -> None:
    a, b = ir.var("in.put", shape=(2,)), ir.var("in.put", shape=(2,))
    mod = ir.IRModule.from_expr(ir.Function([a, b], op.add(a, b)))
    assert "%in_put, " in str(mod) or "%in_put:" in str(mod)
    assert "%in_put_1" in str(mod)
    assert_structural_equal(ir.parse(str(mod)), mod)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "def @main(%x: Tensor[(2,), float32]) { add(%x, meta[Constant][0]) }\n"
            "#[metadata]\nmeta[Constant][0] = float32 (2) AAAAAAAAAAA",
            "metadata is not valid base64",
        ),
        ('def @main(%x: Tensor[(2,), float32]) { take(%x, [0], mode="\\x") }', "bad escape"),
        ("def @main(%x: float32) { add(%x, " + "[" * 100 + "1f" + "]" * 100 + ") }",
         "tensor literal nested deeper"),
        ("def @main(%x: Tensor[(2, 3), float32]) { sum(%x, axis=" + "[" * 5000 + "1"
         + "]" * 5000 + ") }", "attribute list nested deeper"),
        ("def @main(%x: " + "(" * 5000 + "float32" + ")" * 5000 + ") { %x }",
         "tuple type nested deeper"),
    ],
)  # fmt: skip
def test_malformed_text_is_a_parse_error_with_the_place(text: str, message: str) -> None:
    with pytest.raises(ir.ParseError, match=rf"^\d+:\d+: {message}"):
        ir.parse(text)


def test_nan_attributes_round_trip_exactly() -> None:
    mod = ir.parse("def @main(%x: float32) { leaky_relu(%x, alpha=nan) }")
    assert ir.structural_equal(ir.parse(str(mod)), mod)
    assert ir.structural_hash(ir.parse(str(mod))) == ir.structural_hash(mod)
