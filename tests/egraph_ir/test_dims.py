"""Symbolic dimensions (egraph_ir/dims.py, issue #49 step 1): size variables in types, one
normal form for their expressions, the text format, type inference carrying expressions,
the interpreter binding sizes from its inputs, and `specialize` for the code generator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from egraph_ir import op
from egraph_ir.dims import Dim, ShapeDecisionError, size_var

NAMES = ("batch", "seq", "past")


@st.composite
def polynomials(draw: st.DrawFn) -> tuple[object, object]:
    """A random expression built twice: as a Dim, and as a function of the sizes."""
    leaves = st.one_of(st.integers(0, 9), st.sampled_from(NAMES))
    expr = draw(
        st.recursive(
            leaves,
            lambda inner: st.tuples(st.sampled_from("+-*"), inner, inner),
            max_leaves=8,
        )
    )

    def build(e: object, value: object) -> object:
        if isinstance(e, tuple):
            a, b = build(e[1], value), build(e[2], value)
            return {"+": a + b, "-": a - b, "*": a * b}[e[0]]  # type: ignore[operator]
        if isinstance(e, str):
            return size_var(e) if value is None else value[e]  # type: ignore[index]
        return e

    return build(expr, None), lambda sizes: build(expr, sizes)


@given(poly=polynomials(), values=st.tuples(*[st.integers(0, 50)] * 3))
def test_expressions_evaluate_as_integer_arithmetic(poly, values) -> None:
    dim, reference = poly
    sizes = dict(zip(NAMES, values, strict=True))
    got = dim if isinstance(dim, int) else dim.evaluate(sizes)
    assert got == reference(sizes)


def test_one_normal_form() -> None:
    seq, batch = size_var("seq"), size_var("batch")
    assert seq + 1 == 1 + seq and batch * seq == seq * batch
    assert seq - seq == 0 and isinstance(seq - seq, int)  # constants are plain ints
    assert (seq * 4) // 2 == seq * 2 and str(seq // 2) == "floordiv(seq, 2)"
    assert str(2 * batch * seq + seq + 1) == "2 * batch * seq + seq + 1"
    assert hash(seq + 1) == hash(1 + seq)


def test_orders_hold_for_every_size_or_are_refused() -> None:
    seq = size_var("seq")
    assert seq >= 0 and not seq < 0
    with pytest.raises(ShapeDecisionError, match="cannot decide seq > 3 for every size"):
        _ = seq > 3
    with pytest.raises(ShapeDecisionError, match="only known when the program runs"):
        range(seq)  # type: ignore[arg-type]


def test_the_text_format_prints_and_parses_symbolic_types() -> None:
    text = """def @main(%x: Tensor[(batch, seq + 1, 768), float32], %y: Tensor[(floordiv(seq, 2), 2 * batch), float32]) {
  %x
}"""
    mod = ir.parse(text)
    t = mod["main"].params[0].type_annotation
    assert isinstance(t, ir.TensorType) and t.shape[1] == size_var("seq") + 1
    assert str(ir.parse(str(mod))) == str(mod)
    assert ir.structural_equal(ir.parse(str(mod)), mod)
    with pytest.raises(ir.ParseError, match="floordiv divides by a number"):
        ir.parse("def @main(%x: Tensor[(floordiv(a, b),), float32]) { %x }")


def _attention_block() -> ir.IRModule:
    """A transformer block's shapes over (batch, seq): projections, heads split by
    reshape/transpose on static sizes, scores over seq x seq, a mask broadcast, softmax,
    layer norm, and a KV cache concatenated along a symbolic `past`."""
    rng = np.random.default_rng(0)
    x = ir.var("x", shape=("batch", "seq", 16))
    mask = ir.var("mask", shape=("batch", "seq"))
    past = ir.var("past", shape=("batch", "past", 16))
    w = ir.const(rng.standard_normal((16, 16)).astype("float32") * 0.2)
    q = op.matmul(x, w)
    kv = op.concatenate([past, op.matmul(x, w)], axis=1)  # (batch, past + seq, 16)
    scores = op.batch_matmul(q, kv, transpose_b=True)  # (batch, seq, past + seq)
    scores = op.add(scores, op.expand_dims(op.sum(mask, axis=(1,), keepdims=True), axis=2))
    attended = op.batch_matmul(op.softmax(scores, axis=-1), kv, transpose_b=False)
    gamma, beta = ir.const(np.ones(16, "float32")), ir.const(np.zeros(16, "float32"))
    out = op.layer_norm(op.add(attended, x), gamma, beta, axis=-1)
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x, mask, past], out)))


def test_type_inference_carries_the_expressions() -> None:
    mod = _attention_block()
    assert str(mod["main"].checked_type.ret) == "Tensor[(batch, seq, 16), float32]"
    kv = next(
        e
        for e in ir.post_order(mod["main"].body)
        if isinstance(e, ir.Call) and e.op.name == "concatenate"
    )
    assert str(kv.checked_type) == "Tensor[(batch, past + seq, 16), float32]"


@given(batch=st.integers(1, 3), seq=st.integers(1, 9), past=st.integers(0, 6))
def test_the_interpreter_runs_any_consistent_shape(batch: int, seq: int, past: int) -> None:
    mod = _attention_block()
    rng = np.random.default_rng(batch * 100 + seq * 10 + past)
    x = rng.standard_normal((batch, seq, 16)).astype("float32")
    mask = rng.standard_normal((batch, seq)).astype("float32")
    kv = rng.standard_normal((batch, past, 16)).astype("float32")
    got = ir.interpret(mod, x, mask, kv)
    fixed = ir.specialize(mod, {"batch": batch, "seq": seq, "past": past})
    np.testing.assert_array_equal(got, ir.interpret(fixed, x, mask, kv))
    assert got.shape == (batch, seq, 16)


def test_inputs_that_disagree_are_one_error_naming_the_dimension() -> None:
    mod = _attention_block()
    x, kv = np.zeros((2, 37, 16), "float32"), np.zeros((2, 3, 16), "float32")
    with pytest.raises(ir.TypeInferenceError, match="dimension 'seq' is 40 here but 37"):
        ir.interpret(mod, x, np.zeros((2, 40), "float32"), kv)
    with pytest.raises(ir.TypeInferenceError, match="rank 3 where the program expects"):
        ir.interpret(mod, x, np.zeros((2, 37, 1), "float32"), kv)


def test_an_expression_is_checked_once_every_input_is_bound() -> None:
    """(past + 1) in the first input is checked against `past` the second one gives; a
    size only an expression names cannot be learned, which is said."""
    total, past = ir.var("total", shape=(ir.size_var("past") + 1,)), ir.var("p", shape=("past",))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([total, past], op.sum(total))))
    assert ir.interpret(mod, np.ones(4, "float32"), np.ones(3, "float32")) == 4.0
    with pytest.raises(
        ir.TypeInferenceError, match=r"dimension past \+ 1 is 4, but the input has 5"
    ):
        ir.interpret(mod, np.ones(5, "float32"), np.ones(3, "float32"))
    alone = ir.infer_type(ir.IRModule.from_expr(ir.Function([total], op.sum(total))))
    with pytest.raises(ir.TypeInferenceError, match="names past, which no input gives"):
        ir.interpret(alone, np.ones(4, "float32"))


def test_shapes_that_cannot_agree_are_refused_at_inference() -> None:
    a, b = ir.var("a", shape=("batch", "seq")), ir.var("b", shape=("batch", "other"))
    with pytest.raises(ir.TypeInferenceError, match=r"cannot broadcast \(batch, seq\)"):
        ir.infer_type(ir.IRModule.from_expr(ir.Function([a, b], op.add(a, b))))


def test_one_build_runs_any_sizes_and_specialize_fixes_them() -> None:
    mod = _attention_block()
    symbolic = codegen.build(mod)
    assert symbolic.size_names == ["batch", "seq", "past"]
    fixed = ir.specialize(mod, {"batch": 2, "seq": 5, "past": 3})
    assert all(isinstance(d, int) for p in fixed["main"].params for d in p.checked_type.shape)
    rng = np.random.default_rng(1)
    feeds = [
        rng.standard_normal(p.checked_type.shape).astype("float32") for p in fixed["main"].params
    ]
    want = ir.interpret(mod, *feeds)
    np.testing.assert_allclose(codegen.build(fixed).run(*feeds), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(symbolic.run(*feeds), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ir.TypeInferenceError, match=r"give a size for past"):
        ir.specialize(mod, {"batch": 2, "seq": 5})
    with pytest.raises(ir.TypeInferenceError, match="did you mean 'batch'"):
        ir.specialize(mod, {"batc": 2, "seq": 5, "past": 1})
    assert isinstance(size_var("seq"), Dim)
