"""FuseOps: TVM's fusion rules on small graphs and on the built-in models."""

from __future__ import annotations

import numpy as np
import pytest

import egraph_ir as ir
import passmgr as pm
from egraph_ir import models, op
from egraph_ir.expr import Call, Function
from egraph_ir.testing import assert_allclose
from passmgr.testing import check_pass


def groups(mod: ir.IRModule) -> list[list[str]]:
    """Op names of each primitive function called from main, in execution order."""
    out = []
    for node in ir.post_order(mod["main"].body):
        if isinstance(node, Call) and isinstance(node.op, Function):
            assert node.op.attrs.get("Primitive") == 1
            names = [n.op.name for n in ir.post_order(node.op.body) if isinstance(n, Call)]
            out.append(names)
    return out


def fuse(fn: ir.Function, **ctx) -> ir.IRModule:
    with pm.PassContext(**ctx):
        return pm.passes.FuseOps()(ir.infer_type(ir.IRModule.from_expr(fn)))


def test_dense_takes_its_epilogue_and_elementwise_chains_fuse() -> None:
    x = ir.var("x", shape=(4, 8))
    w = ir.const(np.ones((16, 8), "float32"))
    b = ir.const(np.ones(16, "float32"))
    y = op.relu(op.add(op.dense(x, w), b))
    z = op.softmax(y)
    out = fuse(ir.Function([x], op.tanh(op.exp(z))))
    # softmax is out-elementwise fusable (as in TVM): it takes the elementwise ops after it
    assert groups(out) == [["dense", "add", "relu"], ["softmax", "exp", "tanh"]]


def test_injective_producers_fuse_into_a_reduction_but_not_into_a_matmul() -> None:
    x = ir.var("x", shape=(4, 8))
    s = op.sum(op.exp(op.transpose(x, axes=(1, 0))), axis=(1,))
    m = op.matmul(op.negative(x), ir.const(np.ones((8, 2), "float32")))
    out = fuse(ir.Function([x], ir.Tuple([s, m])))
    assert sorted(groups(out)) == sorted([["transpose", "exp", "sum"], ["negative"], ["matmul"]])


def test_a_diamond_fuses_whole_and_an_escaping_value_does_not() -> None:
    x = ir.var("x", shape=(4, 8))
    a = op.exp(x)
    diamond = op.add(op.sigmoid(a), op.tanh(a))
    assert groups(fuse(ir.Function([x], diamond))) == [["exp", "sigmoid", "tanh", "add"]]
    escape = ir.Tuple([diamond, a])  # a is also an output: it must be materialised
    assert sorted(groups(fuse(ir.Function([x], escape)))) == sorted(
        [["exp"], ["sigmoid", "tanh", "add"]]
    )


def test_a_table_lookup_joins_an_epilogue_and_a_gather_does_not() -> None:
    """take from a constant 1-D table at indices of the result's shape reads one index
    per element (a quantised sigmoid): it fuses like an elementwise op; a take from a
    computed table stays injective, outside the convolution's epilogue."""
    x = ir.var("x", shape=(1, 4, 6, 6), dtype="uint8")
    w = ir.const(np.ones((4, 4, 3, 3), "int8"))
    zx, zw = ir.const(np.array(0, "uint8")), ir.const(np.array(0, "int8"))
    acc = op.qnn_conv2d(x, w, zx, zw, padding=[1] * 4)
    table = ir.const(np.arange(8, dtype="int32") * 3)
    lookup = op.take(table, acc, axis=0, mode="fast")
    assert groups(fuse(ir.Function([x], lookup))) == [["qnn_conv2d", "take"]]
    t = ir.var("t", shape=(8,), dtype="int32")
    gather = op.take(op.add(t, t), acc, axis=0, mode="fast")
    fused = groups(fuse(ir.Function([x, t], gather)))
    assert not any("qnn_conv2d" in g and "take" in g for g in fused)


def test_an_epilogue_stops_where_the_shape_changes() -> None:
    x = ir.var("x", shape=(4, 8))
    m = op.mean(op.multiply(x, x), axis=(1,), keepdims=True)
    normed = op.divide(x, op.sqrt(op.add(m, ir.const(np.float32(1e-5)))))
    assert groups(fuse(ir.Function([x], normed))) == [
        ["multiply", "mean", "add", "sqrt"],
        ["divide"],
    ]


def test_max_depth_caps_group_size() -> None:
    x = ir.var("x", shape=(8,))
    e: ir.Expr = x
    for _ in range(10):
        e = op.negative(e)
    sizes = [len(g) for g in groups(fuse(ir.Function([x], e), config={"fuse.max_depth": 4}))]
    assert max(sizes) <= 4 and sum(sizes) == 10


def test_models_fuse_and_keep_their_results() -> None:
    for name in models.NAMES:
        mod = models.get(name)
        with pm.PassContext(opt_level=3) as ctx:
            out = pm.passes.FuseOps()(mod)
        assert 1 <= ctx.run.last("FuseOps").groups < 20
        x = models.example_inputs(name)
        assert_allclose(ir.interpret(out, **x), ir.interpret(mod, **x))
    assert len(groups(pm.passes.FuseOps()(models.elementwise()))) == 1


def test_fuse_ops_is_sound_and_idempotent_on_random_programs() -> None:
    report = check_pass(pm.passes.FuseOps(), max_examples=30)
    assert report.ok, str(report)


def test_fuse_depth_is_bounded_with_a_clear_error() -> None:
    x = ir.var("x", shape=(4,))
    mod = ir.IRModule.from_expr(ir.Function([x], ir.op.exp(x)))
    ctx = pm.PassContext(config={"fuse.max_depth": 300})
    with ctx, pytest.raises(ir.ConfigError, match=r"fuse\.max_depth must be 1 to 256, got 300"):
        pm.passes.FuseOps()(mod)
