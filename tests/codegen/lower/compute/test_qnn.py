"""requantize as integer epilogue code (codegen/lower/compute/qnn.py): bit for bit the
reference (ONNX Runtime's rounding and saturation) for any int32 sum, per-tensor and
per-channel multipliers and both 8-bit types; multipliers it cannot take exactly keep the
float form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.lower.compute.qnn import MAX_MULTIPLIER, integer_requantize


def _requantize(acc_shape, multiplier: np.ndarray, zero: np.ndarray) -> ir.Function:
    acc = ir.var("acc", shape=acc_shape, dtype="int32")
    return ir.Function([acc], ir.op.requantize(acc, ir.const(multiplier), ir.const(zero)))


@given(
    per_channel=st.booleans(),
    out=st.sampled_from(["uint8", "int8"]),
    top=st.sampled_from([1e-4, 0.01, 0.2, MAX_MULTIPLIER]),
    seed=st.integers(0, 2**16),
)
def test_integer_requantize_equals_the_reference(per_channel, out, top, seed) -> None:
    rng = np.random.default_rng(seed)
    shape = (2, 5, 3, 7)
    count = shape[1] if per_channel else 1
    multiplier = rng.uniform(top / 100, top, count).astype(np.float32)
    multiplier = multiplier.reshape(-1, 1, 1) if per_channel else multiplier.reshape(())
    low, high = (0, 255) if out == "uint8" else (-128, 127)
    zero = np.array(rng.integers(low, high, endpoint=True), out)
    fn = _requantize(shape, multiplier, zero)
    typed = ir.infer_type(ir.IRModule.from_expr(fn))["main"].body
    assert integer_requantize(typed)
    spread = int(rng.choice([300, 2**16, 2**31 - 1]))
    acc = rng.integers(-spread - 1, spread, shape, endpoint=True).astype(np.int32)
    acc.flat[:4] = [-(2**31), 2**31 - 1, 0, -1]  # the extremes round and saturate too
    exe = codegen.build(fn)
    assert "requantize" in exe.graph.kernels()[0].ops  # the integer form, not floats
    np.testing.assert_array_equal(exe.run(acc=acc), ir.interpret(fn, acc))


@pytest.mark.parametrize("multiplier", [0.3, 4.0, float("inf")])
def test_larger_multipliers_keep_the_float_form(multiplier) -> None:
    fn = _requantize((4, 9), np.array(multiplier, np.float32), np.array(3, np.uint8))
    typed = ir.infer_type(ir.IRModule.from_expr(fn))["main"].body
    assert not integer_requantize(typed)
    with pm.PassContext():
        exe = codegen.build(fn)
    assert "requantize" not in exe.graph.kernels()[0].ops
    acc = np.random.default_rng(0).integers(-(2**31), 2**31 - 1, (4, 9)).astype(np.int32)
    np.testing.assert_array_equal(exe.run(acc=acc), ir.interpret(fn, acc))
