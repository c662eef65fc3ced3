"""A body's text (codegen/loop_text.py), the key kernels share code by: equal exactly
where `repr` is equal (the key it replaced), whatever objects the bodies share, and of a
size linear in the distinct expressions, however often each is used."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codegen.llvm.sharing import single_assignment
from codegen.loop_ir import (
    INDEX,
    Bin,
    Cast,
    Const,
    Declare,
    For,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Select,
    Stmt,
    Store,
    Un,
)
from codegen.loop_text import body_text

# (op, operand indexes) programs: each step makes a node from earlier ones, so a program
# builds a DAG; replaying it without sharing builds the same tree with fresh objects
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["const", "var", "load", "add", "mul", "max", "neg", "select", "cast"]),
        st.integers(0, 1_000),
        st.integers(0, 1_000),
        st.sampled_from([0.0, -0.0, 1.5, 2]),
    ),
    min_size=1,
    max_size=12,
)


Steps = list[tuple[str, int, int, float]]


def _build(steps: Steps, share: bool) -> LExpr:
    made: list[LExpr] = []

    def operand(i: int) -> LExpr:
        if not made:
            return LoopVar(INDEX, "i")
        return made[i % len(made)] if share else _build(prefixes[i % len(made)], False)

    prefixes = [steps[: n + 1] for n in range(len(steps))]
    for kind, a, b, value in steps:
        x, y = operand(a), operand(b)
        if kind == "const":
            made.append(Const("float32", value))
        elif kind == "var":
            made.append(LoopVar(INDEX, "ij"[a % 2]))
        elif kind == "load":
            made.append(Load("float32", "x", x))
        elif kind == "neg":
            made.append(Un(x.dtype, "neg", x))
        elif kind == "select":
            made.append(Select(x.dtype, Bin("bool", "lt", x, x), x, x))
        elif kind == "cast":
            made.append(Cast("int32", x))
        else:
            made.append(Bin(x.dtype, kind, x, y))
    return made[-1]


def _body(value: LExpr) -> list[Stmt]:
    i = LoopVar(INDEX, "i")
    return [For("i", 8, [Declare("t", value), Store("out", i, Ref(value.dtype, "t"))])]


@given(STEPS, STEPS)
def test_texts_are_equal_exactly_where_reprs_are(one: Steps, other: Steps) -> None:
    a, b = _body(_build(one, True)), _body(_build(other, True))
    assert (body_text(a) == body_text(b)) == (repr(a) == repr(b))


@given(STEPS)
def test_sharing_objects_does_not_change_the_text(steps: Steps) -> None:
    assert body_text(_body(_build(steps, True))) == body_text(_body(_build(steps, False)))


def test_a_value_used_everywhere_is_written_once_and_deep_chains_do_not_recurse() -> None:
    e: LExpr = Load("float32", "x", LoopVar(INDEX, "i"))
    for _ in range(60):  # as a tree, 2^60 nodes
        e = Bin("float32", "add", e, e)
    assert len(body_text(_body(e)).splitlines()) < 80
    assert single_assignment(_body(e)) == {"t"}
    chain: LExpr = Const("float32", 0.0)
    for n in range(20_000):
        chain = Bin("float32", "add", chain, Const("float32", float(n)))
    assert body_text(_body(chain)).count("\n") > 20_000
