"""Loop-IR arithmetic as operators builds exactly the nodes the helper functions build
(the generated LLVM of every model stayed byte-identical when the kernels moved to
operators), and an op name the emitter does not know fails when the node is built."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from codegen.loop_ir import INDEX, Bin, BinOp, Const, LExpr, LoopVar, Un, add, idx, mul, operands


def _same(a: LExpr, b: LExpr) -> bool:
    """Node-for-node equality (loop-IR nodes compare by identity)."""
    todo = [(a, b)]
    while todo:
        x, y = todo.pop()
        if type(x) is not type(y) or x.dtype != y.dtype:
            return False
        if isinstance(x, Bin) and x.op != y.op:  # type: ignore[union-attr]
            return False
        if isinstance(x, Const | LoopVar) and vars(x) != vars(y):
            return False
        todo += zip(operands(x), operands(y), strict=True)
    return True


small = st.integers(-3, 40)


@given(k=small, n=small, m=small)
def test_operators_build_what_the_helpers_build(k: int, n: int, m: int) -> None:
    x, y = LoopVar(INDEX, "x"), LoopVar(INDEX, "y")
    assert _same((x * k + y) * n + m, add(mul(add(mul(x, idx(k)), y), idx(n)), idx(m)))
    assert _same(k + x, add(idx(k), x)) and _same(n * x, mul(idx(n), x))
    assert _same(x - k, Bin(INDEX, "sub", x, idx(k))) and _same(k - x, Bin(INDEX, "sub", idx(k), x))
    assert _same(x // (n or 1), Bin(INDEX, "div", x, idx(n or 1)))
    assert _same(x % (m or 1), Bin(INDEX, "rem", x, idx(m or 1)))


def test_adding_zero_and_multiplying_by_one_fold() -> None:
    x = LoopVar(INDEX, "x")
    assert x + 0 is x and 0 + x is x and x * 1 is x and 1 * x is x
    assert _same(x * 0, idx(0))


def test_an_unknown_op_fails_when_the_node_is_built() -> None:
    x = LoopVar(INDEX, "x")
    assert Bin(INDEX, "add", x, x).op is BinOp.ADD
    with pytest.raises(ValueError, match="unknown loop-IR BinOp 'ad'; known: add, sub"):
        Bin(INDEX, "ad", x, x)
    with pytest.raises(ValueError, match="unknown loop-IR UnOp 'expp'"):
        Un("float32", "expp", x)
