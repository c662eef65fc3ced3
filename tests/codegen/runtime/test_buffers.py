"""Executable.run_into: outputs written into kept storage (codegen.OutputBuffers) or the
caller's arrays, equal to run's; a decoder's growing presents reuse the same memory."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import egraph_ir as ir
from egraph_ir import op


def _decoder_step() -> ir.IRModule:
    """A query row attending over its cache with the new key appended (the present)."""
    past = ir.size_var("past")
    q = ir.var("q", shape=(2, 1, 8), dtype="float32")
    cache = ir.var("cache", shape=(2, past, 8), dtype="float32")
    keys = op.concatenate([cache, q], axis=1)
    scores = op.softmax(op.batch_matmul(q, keys), axis=-1)
    body = ir.Tuple([op.batch_matmul(scores, op.transpose(keys, axes=(0, 2, 1))), keys])
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([q, cache], body)))


def test_a_decoder_feeds_its_kept_presents_back_and_matches_the_interpreter() -> None:
    mod = _decoder_step()
    exe = codegen.build(mod)
    buffers = codegen.OutputBuffers()
    rng = np.random.default_rng(0)
    cache = np.zeros((2, 0, 8), "float32")
    storage = []
    for _ in range(40):
        q = rng.standard_normal((2, 1, 8)).astype("float32")
        out, present = exe.run_into(buffers, q, cache)
        want_out, want_present = ir.interpret(mod, q, cache)
        np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(present, want_present)
        assert present.base is not None  # a view of kept storage, not a new array
        storage.append(buffers.kept_bytes)
        cache = present  # the step's present is the next step's past (the other set)
    # grown by doubling: 40 growing presents in each of two sets, a handful of growths
    assert len(set(storage)) <= 16 and storage[-1] < 4 * 2 * (2 * 41 * 8 * 4 + 2 * 8 * 4)


def test_the_callers_own_arrays_are_written_and_a_wrong_one_is_named() -> None:
    x = ir.var("x", shape=(4, 16), dtype="float32")
    w = np.random.default_rng(1).standard_normal((32, 16)).astype("float32")
    exe = codegen.build(ir.Function([x], op.relu(op.dense(x, ir.const(w)))))
    out = np.full((4, 32), np.nan, "float32")
    x_value = np.random.default_rng(2).standard_normal((4, 16)).astype("float32")
    got = exe.run_into({exe.output_names[0]: out}, x=x_value)
    assert got is out
    np.testing.assert_allclose(out, np.maximum(x_value @ w.T, 0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ir.CodegenError, match=r"float32\[4, 32\].*got float32\[4, 31\]"):
        exe.run_into({exe.output_names[0]: np.empty((4, 31), "float32")}, x=x_value)
    with pytest.raises(ir.CodegenError, match="the outputs are"):
        exe.run_into({"logits": out}, x=x_value)
    with pytest.raises(ir.CodegenError, match="not C-contiguous"):
        exe.run_into({exe.output_names[0]: np.empty((32, 4), "float32").T}, x=x_value)
