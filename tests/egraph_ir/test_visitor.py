"""Visitors: dispatch, once-per-node visits, memoised rewriting and binding-site rewrites."""

from __future__ import annotations

import numpy as np
import pytest

import egraph_ir as ir
from egraph_ir import op
from egraph_ir.visitor import free_vars, post_order


def diamond():
    x = ir.var("x", shape=(2,))
    shared = op.exp(x)
    return x, shared, op.add(op.relu(shared), op.sigmoid(shared))


def test_post_order_visits_children_first_and_shared_nodes_once() -> None:
    x, shared, root = diamond()
    order = list(post_order(root))
    assert order.count(shared) == 1
    assert order.index(x) < order.index(shared) < order.index(root) == len(order) - 1


def test_mutator_rewrites_a_shared_node_once_and_keeps_sharing() -> None:
    x, _shared, root = diamond()
    seen = []

    class ExpToTanh(ir.ExprMutator):
        def rewrite_call(self, pre, post):
            seen.append(pre.op.name)
            return op.tanh(post.args[0]) if post.op.name == "exp" else post

    out = ExpToTanh().visit(root)
    assert seen.count("exp") == 1
    a, b = out.args
    assert a.args[0] is b.args[0] and a.args[0].op.name == "tanh"
    assert ExpToTanh().visit(x) is x


def test_mutator_returns_the_same_object_when_nothing_changes() -> None:
    _, _, root = diamond()
    assert ir.ExprMutator().visit(root) is root


def test_rewriting_a_variable_renames_binding_sites() -> None:
    mod = ir.parse("def @main(%x: Tensor[(2,), float32]) { let %y = exp(%x); add(%y, %y) }")
    fn = mod["main"]

    class Rename(ir.ExprMutator):
        def rewrite_var(self, pre, post):
            return ir.Var(pre.name_hint + "_new", pre.type_annotation)

    out = Rename().visit(fn)
    assert [p.name_hint for p in out.params] == ["x_new"]
    assert out.body.var.name_hint == "y_new"
    assert ir.structural_equal(out, fn)

    class Bad(ir.ExprMutator):
        def rewrite_var(self, pre, post):
            return ir.const(1.0)

    with pytest.raises(TypeError, match="binding sites need a Var"):
        Bad().visit(fn)


def test_functor_dispatch_and_unhandled_kinds() -> None:
    class Depth(ir.ExprFunctor):
        def visit_var(self, v):
            return 0

        def visit_call(self, c):
            return 1 + max(self.visit(a) for a in c.args)

    x = ir.var("x", shape=(2,))
    assert Depth().visit(op.relu(op.add(x, x))) == 2
    with pytest.raises(NotImplementedError, match="does not handle Constant"):
        Depth().visit(ir.const(1.0))


def test_free_vars_in_order_of_use() -> None:
    a, b = ir.var("a", shape=(1,)), ir.var("b", shape=(1,))
    y = ir.var("y")
    e = ir.Let(y, op.add(b, a), op.multiply(y, a))
    assert free_vars(e) == [b, a]
    mod = ir.IRModule.from_expr(e)
    assert [p.name_hint for p in mod["main"].params] == ["b", "a"]
    one, two = np.ones(1, "float32"), np.full(1, 2, "float32")
    np.testing.assert_allclose(ir.interpret(mod, a=one, b=two), [3])  # (b + a) * a
