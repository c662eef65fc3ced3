"""Elementwise kernels whose trailing axes run as one loop (codegen/lower/nests.py
merged_from): exact for every broadcast pattern, and taken only where no tensor needs the
per-axis indices."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.lower.group import Group
from codegen.lower.nests import merged_from
from egraph_ir import op
from egraph_ir.testing import assert_allclose


def _group(fn: ir.Function) -> Group:
    fn = ir.infer_type(ir.Function(fn.params, fn.body))
    return Group(fn, "k")


@given(
    st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 9), st.integers(1, 9)),
    st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()), max_size=3),
    st.integers(0, 2**16),
)
def test_every_broadcast_pattern_agrees_with_the_interpreter(
    shape: tuple[int, int, int, int], patterns: list[tuple[bool, ...]], seed: int
) -> None:
    """x of the full shape times sigmoid of operands that keep or drop each axis: merged
    or not, each element reads the right one of every operand."""
    rng = np.random.default_rng(seed)
    x = ir.var("x", shape=shape)
    params, inputs, body = [x], {"x": rng.standard_normal(shape).astype("float32")}, x
    for i, keep in enumerate(patterns):
        dims = tuple(d if k else 1 for d, k in zip(shape, keep, strict=True))
        p = ir.var(f"p{i}", shape=dims)
        params.append(p)
        inputs[p.name_hint] = rng.standard_normal(dims).astype("float32")
        body = op.add(op.multiply(body, op.sigmoid(p)), p)
    fn = ir.Function(params, body)
    exe = codegen.build(fn)
    assert "host" not in exe.kernel_kinds()
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))


def test_planes_merge_where_every_operand_reads_them_whole_or_not_at_all() -> None:
    x = ir.var("x", shape=(1, 64, 14, 14))
    scale = ir.var("s", shape=(1, 64, 1, 1))
    rows = ir.var("r", shape=(1, 1, 14, 1))
    fn = ir.Function([x, scale], op.multiply(x, op.sigmoid(scale)))
    assert merged_from(_group(fn), _group(fn).fn.body) == 2  # a loop over each 14x14 plane
    fn = ir.Function([x, rows], op.add(x, rows))
    assert merged_from(_group(fn), _group(fn).fn.body) is None  # rows need the row index
    small = ir.var("y", shape=(1, 1, 4, 4))
    fn = ir.Function([small], op.abs(small))
    assert merged_from(_group(fn), _group(fn).fn.body) is None  # the thread axis stays


@given(
    st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 9), st.integers(1, 9)),
    st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()), max_size=3),
    st.sampled_from([8, 16]),
    st.integers(0, 2**16),
)
def test_blocked_lanes_stay_the_inner_loop_for_every_broadcast_pattern(
    shape: tuple[int, int, int, int], patterns: list[tuple[bool, ...]], lanes: int, seed: int
) -> None:
    """NCHW16c-style data (a last axis of lanes) with operands that broadcast over any of
    the other axes (a per-channel gate, a bias, a residual): the lanes loop on its own."""
    rng = np.random.default_rng(seed)
    full = (*shape, lanes)
    x = ir.var("x", shape=full)
    params, inputs, body = [x], {"x": rng.standard_normal(full).astype("float32")}, x
    for k, keep in enumerate(patterns):
        operand_shape = tuple(d if kept else 1 for d, kept in zip(shape, keep, strict=True))
        operand_shape = (*operand_shape, lanes)
        v = ir.var(f"v{k}", shape=operand_shape)
        params.append(v)
        inputs[v.name_hint] = rng.standard_normal(operand_shape).astype("float32")
        body = op.multiply(body, v) if k % 2 else op.add(body, v)
    fn = ir.Function(params, body)
    assert_allclose(codegen.build(fn).run(**inputs), ir.interpret(fn, **inputs))


@given(
    st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 12), st.integers(1, 12)),
    st.sampled_from(["mean", "sum"]),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_pooling_blocked_data_sums_whole_vectors(
    shape: tuple[int, int, int, int], name: str, keepdims: bool, seed: int
) -> None:
    """A mean or sum over H and W of (N, C/16, H, W, 16) data (global pooling of blocked
    data) agrees with the interpreter (float32 sums in another order: the tolerance)."""
    full = (*shape, 16)
    x = ir.var("x", shape=full)
    fn = ir.Function([x], op.call(name, x, axis=(2, 3), keepdims=keepdims))
    value = np.random.default_rng(seed).standard_normal(full).astype("float32")
    assert_allclose(codegen.build(fn).run(x=value), ir.interpret(fn, x=value))
