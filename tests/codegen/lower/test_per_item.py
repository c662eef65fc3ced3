"""Groups that compute each item of a leading size apart (codegen/lower/per_item.py): a
CNN over a symbolic batch is lowered once for one image and run once per image, from one
program for every batch; groups that mix items are not taken."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.lower.per_item import leading_size
from egraph_ir import op


def _cnn() -> ir.IRModule:
    """A convolution with bias and relu, a residual block, a per-channel scale, max
    pooling, a flatten that keeps the batch and a classifier: the ops a CNN's groups
    hold, over a symbolic batch."""
    n = ir.size_var("n")
    rng = np.random.default_rng(0)

    def weight(*shape: int) -> ir.Expr:
        return ir.const((rng.standard_normal(shape) * 0.3).astype("float32"))

    x = ir.var("x", shape=(n, 3, 12, 12), dtype="float32")
    y = op.relu(op.add(op.conv2d(x, weight(8, 3, 3, 3), padding=(1, 1)), weight(1, 8, 1, 1)))
    z = op.conv2d(y, weight(8, 8, 3, 3), padding=(1, 1))
    y = op.relu(op.add(op.multiply(z, weight(8, 1, 1)), y))
    y = op.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = op.reshape(y, newshape=(n, 8 * 6 * 6))
    out = op.softmax(op.dense(y, weight(10, 8 * 6 * 6)), axis=-1)
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], out)))


_BUILT: dict[str, tuple[ir.IRModule, codegen.SymbolicExecutable]] = {}


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 40))
def test_a_cnn_over_a_symbolic_batch_runs_every_batch_from_one_build(batch: int) -> None:
    """Drawn batches (beyond the first capacity of 16 too) equal the interpreter; the
    convolutions run per image. 1e-4: float32 sums of up to 72 products, in another
    order than the interpreter's."""
    if "cnn" not in _BUILT:
        mod = _cnn()
        exe = codegen.build(mod)
        assert isinstance(exe, codegen.SymbolicExecutable)
        _BUILT["cnn"] = (mod, exe)
    mod, exe = _BUILT["cnn"]
    assert exe.for_every_size is not None
    kinds = {k.kind for k in exe.for_every_size.graph.kernels()}
    assert "items" in kinds  # the convolutions, once per image
    x = np.random.default_rng(batch).standard_normal((batch, 3, 12, 12)).astype("float32")
    np.testing.assert_allclose(exe(x), ir.interpret(mod, x), rtol=1e-4, atol=1e-4)
    assert len(exe.compiles) <= 3  # capacities 16, 32, 64 at most


def _group(body: Callable[[ir.Expr], ir.Expr], shape: tuple[object, ...] = (4, 6)) -> ir.Function:
    n = ir.size_var("n")
    x = ir.var("x", shape=(n, *shape), dtype="float32")
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], body(x))))["main"]


@pytest.mark.parametrize(
    ("body", "taken"),
    [
        (lambda x: op.softmax(x, axis=-1), True),
        (lambda x: op.sum(x, axis=(1, 2)), True),
        (lambda x: op.transpose(x, axes=(0, 2, 1)), True),
        (lambda x: op.concatenate([x, x], axis=1), True),
        (lambda x: op.add(x, ir.const(np.ones((4, 6), "float32"))), True),
        (lambda x: op.softmax(x, axis=0), False),  # across the items
        (lambda x: op.sum(x, axis=(0,), keepdims=True), False),
        (lambda x: op.transpose(x, axes=(1, 0, 2)), False),
        (lambda x: op.concatenate([x, x], axis=0), False),
        (lambda x: op.cumsum(x, axis=0), False),
    ],
)
def test_only_groups_that_leave_the_leading_axis_alone_are_taken(
    body: Callable[[ir.Expr], ir.Expr], taken: bool
) -> None:
    fn = _group(body)
    assert (leading_size(fn) is not None) == taken, fn


def test_a_second_size_outside_the_leading_axis_is_not_taken() -> None:
    seq = ir.size_var("seq")
    fn = _group(lambda x: op.softmax(x, axis=-1), shape=(seq, 6))
    assert leading_size(fn) is None
