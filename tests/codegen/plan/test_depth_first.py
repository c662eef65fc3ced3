"""Depth first over the batch (codegen/plan/depth_first.py): a batched CNN's large-plane
prefix runs once per image and the program computes what the interpreter does; the cut is
never placed where a tensor before it is read after it; programs it does not take are
returned as they are."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.plan.depth_first import MIN_PLANE, depth_first
from egraph_ir import op
from egraph_ir.testing import assert_allclose
from egraph_ir.visitor import post_order


def _conv(rng: np.random.Generator, x: ir.Expr, c: int, o: int, **attrs: Any) -> ir.Expr:
    groups = attrs.get("groups", 1)
    w = ir.const((rng.standard_normal((o, c // groups, 3, 3)) * 0.3).astype("float32"))
    b = ir.const(rng.standard_normal((o,)).astype("float32"))
    return op.clip(op.bias_add(op.conv2d(x, w, padding=(1, 1, 1, 1), **attrs), b), 0.0, 6.0)


@st.composite
def cnns(draw: st.DrawFn) -> tuple[ir.Function, np.ndarray]:
    """A batch of 2 to 4 images of 28 to 32 pixels: blocks of conv, depthwise, residual
    adds, squeeze-and-excitation gates and pools, then a stride-2 tail and a global mean."""
    batch, size, c = draw(st.integers(2, 4)), draw(st.integers(28, 32)), draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=(batch, 3, size, size))
    h: ir.Expr = _conv(rng, x, 3, c)
    for block in draw(st.lists(st.sampled_from(["conv", "depthwise", "residual", "gate", "pool"]), max_size=4)):  # fmt: skip
        if block == "conv":
            h = _conv(rng, h, c, c)
        elif block == "depthwise":
            h = _conv(rng, h, c, c, groups=c)
        elif block == "residual":
            h = op.add(h, _conv(rng, h, c, c))
        elif block == "gate":
            h = op.multiply(h, op.sigmoid(op.mean(h, axis=(2, 3), keepdims=True)))
        else:
            h = op.max_pool2d(h, pool_size=(3, 3), padding=(1, 1, 1, 1))
    tail = _conv(rng, h, c, 2 * c, strides=(2, 2))
    logits = op.mean(tail, axis=(2, 3))
    fn = ir.Function([x], logits)
    return fn, rng.standard_normal((batch, 3, size, size)).astype("float32")


@given(cnns())
def test_a_cnn_run_image_by_image_equals_the_interpreter(case: tuple[ir.Function, np.ndarray]) -> None:  # fmt: skip
    fn, x = case
    exe = codegen.build(fn)
    assert_allclose(exe.run(x=x), ir.interpret(fn, x=x), what=str(fn))
    joins = [k for k in exe.graph.kernels() if "concatenate" in k.ops]
    assert len(joins) == 1  # the prefix ran per image: its results joined once
    with pm.PassContext(config={"codegen.depth_first": False}):
        batched = codegen.build(fn)
    assert not any("concatenate" in k.ops for k in batched.graph.kernels())


def _typed(fn: ir.Function) -> ir.IRModule:
    return ir.infer_type(ir.IRModule.from_expr(fn))


def test_no_tensor_before_the_cut_is_read_after_it() -> None:
    """The first block's output is also read by the tail (a skip past two blocks): a cut
    after it would leave it computed twice, per image and for the tail, so the cut is the
    first block itself (the second, as small and later, would be taken otherwise)."""
    rng = np.random.default_rng(0)
    x = ir.var("x", shape=(2, 3, 28, 28))
    first = _conv(rng, x, 3, 4)
    third = _conv(rng, _conv(rng, first, 4, 4), 4, 8)
    skip = op.mean(first, axis=(1, 2, 3), keepdims=True)
    mod = _typed(ir.Function([x], op.add(op.mean(third, axis=(2, 3), keepdims=True), skip)))
    out = depth_first(mod)
    convs = [n for n in post_order(out["main"].body) if getattr(getattr(n, "op", None), "name", "") == "conv2d"]  # fmt: skip
    assert len(convs) == 2 + 2  # the first block once per image, then the rest batched
    data = rng.standard_normal((2, 3, 28, 28)).astype("float32")
    assert_allclose(
        ir.interpret(out["main"], x=data), ir.interpret(mod["main"], x=data), what="cut"
    )


def test_programs_without_a_large_plane_prefix_are_kept() -> None:
    rng = np.random.default_rng(1)
    one = ir.var("x", shape=(1, 3, 32, 32))
    single = _typed(ir.Function([one], _conv(rng, one, 3, 4)))
    assert depth_first(single) is single  # batch 1
    side = int(MIN_PLANE**0.5) - 1
    small = ir.var("x", shape=(4, 3, side, side))
    small_mod = _typed(ir.Function([small], _conv(rng, small, 3, 4)))
    assert depth_first(small_mod) is small_mod  # planes under MIN_PLANE
    flat = ir.var("x", shape=(4, 3, 32, 32))
    no_conv = _typed(ir.Function([flat], op.relu(flat)))
    assert depth_first(no_conv) is no_conv  # nothing convolved before a cut
