"""The reference interpreter: inputs, Let, If (lazy), closures, tuples, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import egraph_ir as ir
from egraph_ir import op


def test_inputs_by_position_or_name_and_their_checks() -> None:
    mod = ir.parse(
        "def @main(%a: Tensor[(2,), float32], %b: Tensor[(2,), float32]) { subtract(%a, %b) }"
    )
    a, b = np.ones(2, "float32"), np.full(2, 3, "float32")
    np.testing.assert_allclose(ir.interpret(mod, a, b), [-2, -2])
    np.testing.assert_allclose(ir.interpret(mod, b=a, a=b), [2, 2])
    with pytest.raises(
        ir.TypeInferenceError,
        match=r"input %a expects Tensor\[\(2,\), float32\], got shape \(3,\) float64",
    ):
        ir.interpret(mod, np.ones(3), b)
    with pytest.raises(TypeError, match="missing input"):
        ir.interpret(mod, a)
    with pytest.raises(TypeError, match="unknown input 'c'"):
        ir.interpret(mod, a, b, c=a)


def test_if_evaluates_only_the_taken_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The untaken branch's take must not run (its index lookup raises here)."""
    import egraph_ir.op.shape as shape

    def refuse(*args: object) -> None:
        raise RuntimeError("the untaken branch ran")

    monkeypatch.setattr(shape, "index_in_mode", refuse)
    mod = ir.parse("""def @main(%c: bool, %x: Tensor[(3,), float32], %i: Tensor[(1,), int64]) {
      if (%c) { %x } else { take(%x, %i, axis=0, mode="fast") }
    }""")
    x = np.arange(3, dtype="float32")
    np.testing.assert_allclose(ir.interpret(mod, np.bool_(True), x, np.array([7])), x)
    with pytest.raises(RuntimeError, match="untaken branch ran"):
        ir.interpret(mod, np.bool_(False), x, np.array([7]))


def test_closures_capture_their_environment() -> None:
    mod = ir.parse("""def @main(%x: Tensor[(2,), float32]) {
      let %k = multiply(%x, 2f);
      let %f = fn (%y: Tensor[(2,), float32]) { add(%y, %k) };
      (%f(%x), %f(%k))
    }""")
    x = np.array([1, 2], "float32")
    out = ir.interpret(mod, x)
    assert isinstance(out, tuple)
    np.testing.assert_allclose(out[0], x + 2 * x)
    np.testing.assert_allclose(out[1], 4 * x)


def test_expressions_without_parameters() -> None:
    e = op.add(ir.const(np.ones(2, "float32")), ir.const(1.0))
    np.testing.assert_allclose(ir.interpret(e), [2, 2])


def test_padding_a_scalar_is_the_identity() -> None:
    """Found by the thorough profile: numpy's pad rejects the empty pad_width of a scalar."""
    x = ir.var("x", shape=())
    fn = ir.Function([x], op.pad(x, pad_width=()))
    assert ir.interpret(fn, np.float32(2.5)) == np.float32(2.5)


@given(
    st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint64"]),
    st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=30),
    st.lists(st.sampled_from([0, 1, -1, 2, 3, 7, -7, 8, 2**62]), min_size=1, max_size=30),
)
def test_integer_division_truncates_even_at_the_extremes(dtype, a_bits, divisors) -> None:
    """Truncation toward zero, x / 0 = 0, INT_MIN / -1 wraps; against Python's integers
    (np.abs(INT_MIN) overflowing once made -128 / 8 come out as 16)."""
    from egraph_ir.op.elementwise import divide_ref

    info = np.iinfo(dtype)
    span = info.max - info.min + 1
    n = min(len(a_bits), len(divisors))
    a = [info.min + bits % span for bits in a_bits[:n]]
    a[0] = info.min
    b = [d if info.min <= d <= info.max else 1 for d in divisors[:n]]
    expected = []
    for x, y in zip(a, b, strict=True):
        q = 0 if y == 0 else abs(x) // abs(y) * (-1 if (x < 0) != (y < 0) else 1)
        expected.append((q - info.min) % span + info.min)  # wrap into the dtype
    got = divide_ref(np.array(a, dtype), np.array(b, dtype))
    assert got.dtype == np.dtype(dtype)
    assert [int(v) for v in got] == expected
