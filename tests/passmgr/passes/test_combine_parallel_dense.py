"""CombineParallelDense: golden IR, the transformer's Q/K/V, and random groups of branches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import egraph_ir as ir
import passmgr as pm
from egraph_ir import models, op
from egraph_ir.summary import summarize
from egraph_ir.testing import assert_same_outputs, assert_structural_equal


def combine(mod: ir.IRModule, **kwargs) -> tuple[ir.IRModule, pm.PassContext]:
    with pm.PassContext(opt_level=3) as ctx:
        out = pm.passes.CombineParallelDense(**kwargs)(mod)
    return out, ctx


def test_transformer_qkv_projections_become_one_matmul_with_one_bias() -> None:
    mod = models.transformer()
    out, ctx = combine(mod)
    before, after = summarize(mod).ops, summarize(out).ops
    assert before["matmul"] - after["matmul"] == 2  # Q, K, V -> one
    assert after["split"] == 1 and before["add"] - after["add"] == 2
    assert "split(%2, indices_or_sections=[256, 512], axis=-1)" in out.astext(show_meta=False)
    assert ctx.run.total("CombineParallelDense", "groups_combined") == 1
    assert_same_outputs(out, mod, models.example_inputs("transformer"))


def test_dense_with_bias_add_golden() -> None:
    src = """def @main(%x: Tensor[(2, 4), float32], %w1: Tensor[(3, 4), float32],
                  %w2: Tensor[(5, 4), float32], %b1: Tensor[(3,), float32],
                  %b2: Tensor[(5,), float32]) {
      %0 = bias_add(dense(%x, %w1), %b1, axis=-1);
      %1 = add(%b2, dense(%x, %w2));
      (relu(%0), %1)
    }"""
    expected = """def @main(%x: Tensor[(2, 4), float32], %w1: Tensor[(3, 4), float32],
                  %w2: Tensor[(5, 4), float32], %b1: Tensor[(3,), float32],
                  %b2: Tensor[(5,), float32]) {
      %0 = dense(%x, concatenate(%w1, %w2, axis=0));
      %1 = add(%0, concatenate(%b1, %b2, axis=0));
      %2 = split(%1, indices_or_sections=[3], axis=-1);
      (relu(%2.0), %2.1)
    }"""
    mod = ir.parse(src)
    out, _ = combine(mod, min_num_branches=2)
    assert_structural_equal(out, ir.parse(expected))
    rng = np.random.default_rng(0)
    shapes = {"x": (2, 4), "w1": (3, 4), "w2": (5, 4), "b1": (3,), "b2": (5,)}
    inputs = {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}
    assert_same_outputs(out, mod, inputs)


def test_too_few_branches_or_other_inputs_are_left_alone() -> None:
    x, y = ir.var("x", shape=(2, 4)), ir.var("y", shape=(2, 4))
    w = [ir.const(np.ones((3, 4), "float32")) for _ in range(3)]
    fn = ir.Function([x, y], ir.Tuple([op.dense(x, w[0]), op.dense(x, w[1]), op.dense(y, w[2])]))
    mod = ir.IRModule.from_expr(fn)
    out, _ = combine(mod)
    assert out is mod


def test_bias_is_combined_only_when_every_branch_has_one() -> None:
    x = ir.var("x", shape=(2, 4))
    rng = np.random.default_rng(1)
    w = [ir.const(rng.standard_normal((4, n)).astype("float32")) for n in (2, 3, 4)]
    b = ir.const(rng.standard_normal(3).astype("float32"))
    heads = [op.matmul(x, wi) for wi in w]
    fn = ir.Function([x], ir.Tuple([heads[0], op.add(heads[1], b), heads[2]]))
    mod = ir.IRModule.from_expr(fn)
    out, _ = combine(mod)
    after = summarize(out).ops
    assert after["matmul"] == 1 and after["add"] == 1 and after["split"] == 1
    assert_same_outputs(out, mod, {"x": rng.standard_normal((2, 4)).astype("float32")})


@given(
    kind=st.sampled_from(["dense", "matmul"]),
    units=st.lists(st.integers(1, 6), min_size=2, max_size=5),
    lead=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_groups_compute_the_same(
    kind: str, units: list[int], lead: list[int], with_bias: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    k = 5
    x = ir.var("x", shape=(*lead, k))
    outs: list[ir.Expr] = []
    for n in units:
        shape = (n, k) if kind == "dense" else (k, n)
        w = ir.const(rng.standard_normal(shape).astype("float32"))
        y = op.dense(x, w) if kind == "dense" else op.matmul(x, w)
        if with_bias:
            y = op.add(y, ir.const(rng.standard_normal(n).astype("float32")))
        outs.append(op.tanh(y))
    mod = ir.IRModule.from_expr(ir.Function([x], ir.Tuple(outs)))
    out, _ = combine(mod, min_num_branches=2)
    assert summarize(out).ops[kind] == 1
    assert_same_outputs(out, mod, {"x": rng.standard_normal((*lead, k)).astype("float32")})


def test_min_num_branches_below_two_is_refused() -> None:
    with pytest.raises(ir.CompilerError, match="min_num_branches must be at least 2"):
        pm.passes.CombineParallelDense(min_num_branches=1)
