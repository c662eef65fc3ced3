"""Row reductions compiled by LLVM's vectoriser see every element, whatever the row length
and wherever the extreme sits (remainder iterations included); a regression test for a
maxnum reduction that skipped the tail of a 10-element row."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
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
