"""Compiled reductions and integer arithmetic at their edges: row reductions see every
element whatever the row length and wherever the extreme sits (a regression test for a
vectorised maxnum reduction that skipped the tail of a 10-element row), argmax over
integers, and integer division by -1 and 0."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.testing import assert_allclose


@given(st.integers(1, 41), st.data())
def test_softmax_and_max_see_the_whole_row(length: int, data: st.DataObject) -> None:
    peak = data.draw(st.integers(0, length - 1))
    row = np.linspace(-3.0, 3.0, length, dtype="float32")
    row[peak] = 80.0  # exp(80 - anything smaller than the true max) overflows
    value = np.stack([row, row[::-1]])
    x = ir.var("x", shape=(2, length))
    for body in (op.softmax(x, axis=-1), op.max(x, axis=[1]), op.argmax(x, axis=1)):
        fn = ir.Function([x], body)
        assert_allclose(codegen.build(fn).run(x=value), ir.interpret(fn, x=value), what=str(body))


@given(st.sampled_from(["int8", "uint8", "int32", "int64"]), st.integers(1, 20))
def test_argmax_of_integers_compiles_and_picks_the_first_maximum(dtype: str, length: int) -> None:
    rng = np.random.default_rng(length)
    info = np.iinfo(dtype)
    value = rng.integers(info.min, info.max, (3, length), endpoint=True).astype(dtype)
    value[0] = info.min  # all equal to the lowest value: index 0
    x = ir.var("x", shape=(3, length), dtype=dtype)
    for body in (op.argmax(x, axis=1), op.argmax(x)):
        fn = ir.Function([x], body)
        np.testing.assert_array_equal(codegen.build(fn).run(x=value), ir.interpret(fn, x=value))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_integer_division_by_minus_one_and_zero_does_not_trap(dtype: str) -> None:
    """INT_MIN / -1 traps in hardware (SIGFPE would kill the process): compiled code
    gives the wrapped value, as the interpreter does; x / 0 is 0."""
    info = np.iinfo(dtype)
    x = np.array([7, -7, info.min, info.min, 5, info.max], dtype)
    y = np.array([2, 2, -1, 1, 0, -1], dtype)
    a, b = ir.var("a", shape=(6,), dtype=dtype), ir.var("b", shape=(6,), dtype=dtype)
    for make in (op.divide, op.mod, op.fmod):
        fn = ir.Function([a, b], make(a, b))
        with np.errstate(all="ignore"):
            expected = ir.interpret(fn, a=x, b=y)
        np.testing.assert_array_equal(codegen.build(fn).run(a=x, b=y), expected, make.__name__)


def test_float_mod_and_fmod_compile() -> None:
    x = np.array([-7.5, 7.5, -6.0, 5.25, 3.0, -0.0], "float32")
    y = np.array([2.0, -3.0, 4.0, -5.0, 0.0, 3.0], "float32")
    a, b = ir.var("a", shape=(6,)), ir.var("b", shape=(6,))
    for make in (op.mod, op.fmod):
        fn = ir.Function([a, b], make(a, b))
        got = codegen.build(fn).run(a=x, b=y)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ir.interpret(fn, a=x, b=y)))
        assert_allclose(got, ir.interpret(fn, a=x, b=y))


@pytest.mark.parametrize(
    "text",
    [
        "def @main(%x: Tensor[(17, 1), float32]) { min(%x) }",
        "def @main(%x: Tensor[(1, 3, 1), float32]) { min(broadcast_to(%x, shape=[3, 3, 3])) }",
        "def @main(%x: Tensor[(1, 3, 1), float16]) { max(broadcast_to(%x, shape=[3, 3, 3])) }",
    ],
)
def test_reductions_over_unit_and_broadcast_axes_compile(text: str) -> None:
    """These once took LLVM's vectoriser exponential time (trip-count-1 loops, select
    chains for NaN-aware min/max): now no loop of extent 1 is emitted and min/max are
    llvm.minimum/maximum."""
    mod = ir.parse(text)
    shape = mod["main"].params[0].type_annotation.shape
    dtype = mod["main"].params[0].type_annotation.dtype
    value = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    value.reshape(-1)[0] = np.nan
    assert_allclose(codegen.build(mod).run(x=value), ir.interpret(mod, x=value))


@pytest.mark.parametrize("source", ["float32", "float64", "int32", "uint8", "bool"])
def test_casts_to_float16_round_in_compiled_code(source: str) -> None:
    """float16 values are computed in float32 registers, but a cast to float16 rounds
    there and then: cast(cast(x, float16), float32) is not the identity."""
    value = np.array([1e5, 1.0001, -0.1488, 3, 0, 70000], dtype="float64").astype(source)
    x = ir.var("x", shape=(6,), dtype=source)
    fn = ir.Function([x], op.cast(op.cast(x, dtype="float16"), dtype="float32"))
    with np.errstate(all="ignore"):
        expected = ir.interpret(fn, x=value)
    np.testing.assert_array_equal(codegen.build(fn).run(x=value), expected)


def test_signed_zeros_follow_numpy_through_sign_and_add_zero() -> None:
    """sign(-0.0) is +0.0 as in numpy, and x + 0 is not folded to x without fast-math
    (for x = -0.0 the sum is +0.0): 1 / result shows the sign."""
    x = np.array([-0.0, 0.0, np.nan, -2.0], "float32")
    for text in (
        "def @main(%x: Tensor[(4,), float32]) { divide(1f, sign(%x)) }",
        "def @main(%x: Tensor[(4,), float32]) { divide(1f, add(%x, 0f)) }",
    ):
        mod = ir.parse(text)
        with np.errstate(all="ignore"):
            expected = ir.interpret(mod, x=x)
        with pm.PassContext(opt_level=3):
            got = codegen.build(mod).run(x=x)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("source", ["float32", "float64"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16"])
def test_float_to_int_casts_saturate_and_send_nan_to_zero_everywhere(
    dtype: str, source: str
) -> None:
    """Scalar and vectorised loops alike (64 elements: the cast to 8, 16 and 32 bits is
    a clamp and a conversion there, and int32's top is no float32)."""
    x = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, -2.7, 300.5, 2.0**63], source)
    a = ir.var("a", shape=(64,), dtype=source)
    fn = ir.Function([a], op.cast(a, dtype=dtype))
    info = np.iinfo(dtype)
    expected = np.array(
        [0, info.max, info.min, info.max, info.min, max(-2, info.min), min(300, info.max),
         info.max], dtype=dtype,
    )  # fmt: skip
    edges = np.array([2147483520.0, 2147483648.0, -2147483648.0, 65535.5], source)
    want_edges = np.array(
        [min(int(v), info.max) if v > 0 else max(int(v), info.min) for v in edges], dtype
    )
    x, expected = (
        np.tile(np.concatenate([x, edges]), 6)[:64],
        np.tile(np.concatenate([expected, want_edges]), 6)[:64],
    )
    np.testing.assert_array_equal(ir.interpret(fn, a=x), expected)
    np.testing.assert_array_equal(codegen.build(fn).run(a=x), expected)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis_is_empty(name: str) -> None:
    mod = ir.parse(f"def @main(%x: Tensor[(2, 0), float32]) {{ {name}(%x) }}")
    x = np.zeros((2, 0), "float32")
    assert ir.interpret(mod, x=x).shape == (2, 0)
    assert codegen.build(mod).run(x=x).shape == (2, 0)


@given(
    st.sampled_from(["sum", "mean", "global_avg_pool2d"]),
    st.integers(1, 3),
    st.integers(16, 40),
    st.integers(16, 40),
    st.booleans(),
)
def test_long_float_sums_in_vector_lanes_see_every_element(
    kind: str, lead: int, h: int, w: int, keep: bool
) -> None:
    """Sums over 256 or more trailing elements run as 16 partial sums (codegen/lower/nests.py
    lane_sum) plus the last count % 16 one by one: every element counts, wherever it sits
    (a large value at the very end and one at the start), and a fused epilogue still applies.
    Tolerance: the float32 sum of at most 1,600 values in [-1, 1] in another order than
    numpy's pairwise sum, well inside the default 1e-4 relative / 1e-5 absolute."""
    shape = (lead, 3, h, w)
    rng = np.random.default_rng(h * 100 + w)
    value = rng.uniform(-1, 1, shape).astype("float32")
    value[..., -1, -1] = 100.0
    value[..., 0, 0] = -50.0
    x = ir.var("x", shape=shape)
    if kind == "global_avg_pool2d":
        body = op.global_avg_pool2d(x)
    else:
        body = getattr(op, kind)(x, axis=[2, 3], keepdims=keep)
    fn = ir.Function([x], op.relu(op.add(body, ir.const(np.float32(1.0)))))
    assert_allclose(codegen.build(fn).run(x=value), ir.interpret(fn, x=value), what=str(fn))


@settings(max_examples=10)  # a build each (~1 s)
@given(
    st.tuples(st.integers(1, 3), st.integers(1, 70)),
    st.sampled_from([(True, True), (True, False), (False, False)]),
    st.floats(-50, 50),
    st.integers(0, 2**16),
)
def test_layer_norm_rows_match_the_reference(shape, flags, offset, seed) -> None:
    """The row kernel (codegen/lower/windows.py norm_rows): rows of any length (whole
    vectors and a tail), shifted far from zero (the variance is of deviations, not
    E[x^2] - E[x]^2), with and without scale and shift."""
    center, scale = flags
    rows, n = shape
    rng = np.random.default_rng(seed)
    x = ir.var("x", shape=(rows, n))
    gamma = ir.const(rng.standard_normal(n).astype("float32"))
    beta = ir.const(rng.standard_normal(n).astype("float32"))
    body = op.layer_norm(x, gamma, beta, epsilon=1e-5, center=center, scale=scale)
    fn = ir.Function([x], body)
    value = (rng.standard_normal((rows, n)) + offset).astype("float32")
    with pm.PassContext(disabled_pass=["SimplifyInference"]):
        exe = codegen.build(fn)
    assert [k.kind for k in exe.graph.kernels()] == ["loops"]  # native, not the host's
    # float32 sums of up to 70 values near `offset` (|offset| <= 50): each partial sum is
    # off by a few ulps of 50 * 70, ~1e-4 of the unit-variance deviations at most
    np.testing.assert_allclose(exe.run(x=value), ir.interpret(fn, x=value), rtol=2e-4, atol=2e-4)


@given(
    shape=st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 13), st.integers(1, 19)),
    seed=st.integers(0, 2**16),
)
def test_global_pooling_of_a_dequantized_map_is_one_kernel(shape, seed) -> None:
    """A squeeze-and-excitation pool of 8-bit data (dequantize -> global_avg_pool2d): the
    dequantize fuses into the pool's loop, one run over H x W per channel, and the
    8-bit map is read once."""
    x = ir.var("x", shape=shape, dtype="uint8")
    scale, zero = ir.const(np.array(0.02, "float32")), ir.const(np.array(7, "uint8"))
    fn = ir.Function([x], op.global_avg_pool2d(op.dequantize(x, scale, zero)))
    exe = codegen.build(fn)
    assert len(exe.graph.kernels()) == 1
    value = np.random.default_rng(seed).integers(0, 256, shape).astype("uint8")
    assert_allclose(exe.run(x=value), ir.interpret(fn, value))
