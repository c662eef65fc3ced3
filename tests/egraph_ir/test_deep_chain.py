"""A 20,000-op chain (20 times the recursion limit) goes through every stage with the
default recursion limit."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import egraph_ir as ir
from egraph_ir import op

DEPTH = 20_000


@pytest.fixture(scope="module")
def chain() -> ir.IRModule:
    assert sys.getrecursionlimit() <= 1000 * 10  # the default (pytest may raise it a little)
    x = ir.var("x", shape=(3,))
    e: ir.Expr = x
    for i in range(DEPTH):
        e = op.negative(e) if i % 2 else op.add(e, x)
    return ir.IRModule.from_expr(ir.Function([x], e))


@pytest.mark.slow
def test_deep_chain_all_stages(chain: ir.IRModule) -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the interpreter's default: no stage may recurse per node
    try:
        ir.infer_type(chain)
        assert chain["main"].body.checked_type == ir.TensorType((3,), "float32")
        x = np.array([1.0, 2.0, 3.0], "float32")
        # each pair of steps maps v to -(v + x); starting at x it alternates -2x, x, ...
        np.testing.assert_allclose(ir.interpret(chain, x), x)
        text = str(chain)
        assert text.count("\n") > DEPTH
        back = ir.parse(text)
        assert ir.structural_equal(back, chain)
        assert ir.structural_hash(back) == ir.structural_hash(chain)

        class Count(ir.ExprVisitor):
            calls = 0

            def visit_call(self, call: ir.Call) -> None:
                self.calls += 1

        counter = Count()
        counter.visit(chain["main"])
        assert counter.calls == DEPTH

        class NegToMul(ir.ExprMutator):
            def rewrite_call(self, pre: ir.Call, post: ir.Call) -> ir.Expr:
                if post.op.name == "negative":
                    return op.multiply(post.args[0], ir.const(-1.0))
                return post

        mutated = NegToMul().visit(chain["main"])
        assert isinstance(mutated, ir.Function)
        np.testing.assert_allclose(ir.interpret(mutated, x), x)
    finally:
        sys.setrecursionlimit(limit)
