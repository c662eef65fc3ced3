"""structural_equal / structural_hash: alpha-equivalence, sharing, constants and attrs."""

from __future__ import annotations

import numpy as np

import egraph_ir as ir
from egraph_ir import op


def test_alpha_equivalent_functions_are_equal_and_hash_alike() -> None:
    a = ir.parse("def @main(%x: Tensor[(2,), float32]) { let %t = exp(%x); add(%t, %x) }")
    b = ir.parse("def @main(%u: Tensor[(2,), float32]) { let %v = exp(%u); add(%v, %u) }")
    assert ir.structural_equal(a, b)
    assert ir.structural_hash(a) == ir.structural_hash(b)


def test_differences_are_detected() -> None:
    base = "def @main(%x: Tensor[(2,), float32], %y: Tensor[(2,), float32]) { %s }"
    same = ir.parse(base.replace("%s", "add(%x, %y)"))
    for other in ["add(%y, %x)", "subtract(%x, %y)", "add(%x, %x)", "add(%x, 1f)"]:
        assert not ir.structural_equal(same, ir.parse(base.replace("%s", other))), other
    assert not ir.structural_equal(
        ir.parse("def @main(%x: float32) { sum(%x, keepdims=True) }"),
        ir.parse("def @main(%x: float32) { sum(%x) }"),
    )
    assert not ir.structural_equal(
        ir.parse("def @main(%x: float32) { %x }"), ir.parse("def @main(%x: float64) { %x }")
    )


def test_a_dag_equals_its_unfolded_tree() -> None:
    x = ir.var("x", shape=(2,))
    shared = op.exp(x)
    dag = ir.Function([x], op.add(shared, shared))
    tree = ir.Function([x], op.add(op.exp(x), op.exp(x)))
    assert ir.structural_equal(dag, tree)


def test_constants_compare_by_value_including_nan() -> None:
    c1 = ir.const(np.array([1.0, np.nan], "float32"))
    c2 = ir.const(np.array([1.0, np.nan], "float32"))
    assert ir.structural_equal(c1, c2)
    assert not ir.structural_equal(c1, ir.const(np.array([1.0, np.nan], "float64")))


def test_variable_mapping_must_be_a_bijection() -> None:
    x, y = ir.var("x", shape=(1,)), ir.var("y", shape=(1,))
    f = ir.Function([x, y], op.add(x, y))
    g = ir.Function([x, y], op.add(x, x))
    assert not ir.structural_equal(f, g)
