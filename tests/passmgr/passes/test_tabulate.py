"""TabulateByteFunctions: a byte-to-byte elementwise chain that reads a table (a quantised
SiLU) becomes one table read, equal to the chain on every input; chains without a table
read, or of more than one tensor, stay as they are."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.expr import Call
from egraph_ir.visitor import post_order


def _scalar(value: float | int, dtype: str) -> ir.Expr:
    return ir.const(np.array(value, dtype))


def _qsilu(x: ir.Expr, dtype: str, scales: tuple[float, float, float], zeros: tuple[int, int, int]):
    """x * sigmoid(x) on quantised values, as the QDQ rules write it: QLinearSigmoid, then
    QLinearMul's requantized product of the shifted values."""
    sx, ss, sy = scales
    zx, zs, zy = zeros
    s = op.qnn_sigmoid(
        x, _scalar(sx, "float32"), _scalar(zx, dtype), _scalar(ss, "float32"), _scalar(zs, dtype)
    )

    def shifted(v: ir.Expr, zero: int) -> ir.Expr:
        return op.subtract(op.cast(v, dtype="int32"), op.cast(_scalar(zero, dtype), dtype="int32"))

    product = op.multiply(shifted(x, zx), shifted(s, zs))
    return op.requantize(product, _scalar(sx * ss / sy, "float32"), _scalar(zy, dtype))


def _ops(fn) -> list[str]:
    return [n.op.name for n in post_order(fn.body) if isinstance(n, Call)]


def _prepared(fn: ir.Function) -> ir.Function:
    mod = ir.infer_type(ir.IRModule.from_expr(fn))
    with pm.PassContext(opt_level=2):
        lowered = pm.Sequential([pm.passes.CanonicalizeQnn(), pm.passes.FoldConstant()])(mod)
    return lowered["main"]


@given(
    dtype=st.sampled_from(["uint8", "int8"]),
    scales=st.tuples(*[st.floats(0.005, 0.2)] * 3),
    zeros=st.tuples(*[st.integers(-20, 20)] * 3),
    seed=st.integers(0, 2**16),
)
def test_a_quantised_silu_is_one_table_read_equal_to_the_chain(dtype, scales, zeros, seed) -> None:
    offset = 128 if dtype == "uint8" else 0
    zeros = tuple(z + offset for z in zeros)
    x = ir.var("x", shape=(2, 3, 5, 7), dtype=dtype)
    fn = _prepared(ir.Function([x], _qsilu(x, dtype, scales, zeros)))
    with pm.PassContext(opt_level=2) as ctx:
        out = pm.passes.TabulateByteFunctions()(ir.IRModule.from_expr(fn))
    assert ctx.run.last("TabulateByteFunctions").tables == 1
    assert _ops(out["main"]) == ["take"]
    info = np.iinfo(dtype)
    value = np.random.default_rng(seed).integers(info.min, info.max, (2, 3, 5, 7), endpoint=True)
    value = value.astype(dtype)
    value.flat[:2] = [info.min, info.max]
    want = ir.interpret(fn, value)
    np.testing.assert_array_equal(ir.interpret(out, value), want)
    np.testing.assert_array_equal(codegen.build(out).run(x=value), want)


def test_chains_without_a_table_or_of_two_tensors_stay() -> None:
    x = ir.var("x", shape=(4, 8), dtype="uint8")
    y = ir.var("y", shape=(4, 8), dtype="uint8")
    scaled = op.cast(
        op.clip(op.multiply(op.cast(x, dtype="float32"), ir.const(0.5)), a_min=0.0, a_max=255.0),
        dtype="uint8",
    )
    two = op.qnn_add(
        x, y, ir.const(0.1), _scalar(3, "uint8"), ir.const(0.2), _scalar(4, "uint8"),
        ir.const(0.3), _scalar(5, "uint8"),
    )  # fmt: skip
    for body in (scaled, two):
        fn = _prepared(ir.Function([x, y], body))
        with pm.PassContext(opt_level=2) as ctx:
            out = pm.passes.TabulateByteFunctions()(ir.IRModule.from_expr(fn))
        assert ctx.run.last("TabulateByteFunctions").tables == 0
        assert ir.structural_equal(out["main"], fn)


def test_a_chain_read_by_two_consumers_is_computed_for_both() -> None:
    """The sigmoid's table read feeds the product and is an output too: both results stay
    right, whichever of them becomes a table."""
    x = ir.var("x", shape=(3, 16), dtype="uint8")
    silu = _qsilu(x, "uint8", (0.05, 1 / 256, 0.03), (128, 0, 10))
    s = op.qnn_sigmoid(
        x,
        _scalar(0.05, "float32"),
        _scalar(128, "uint8"),
        _scalar(1 / 256, "float32"),
        _scalar(0, "uint8"),
    )
    fn = _prepared(ir.Function([x], ir.Tuple([silu, s])))
    out = pm.passes.TabulateByteFunctions()(ir.IRModule.from_expr(fn))
    value = np.arange(48, dtype=np.uint8).reshape(3, 16) * 5
    for got, want in zip(ir.interpret(out, value), ir.interpret(fn, value), strict=True):
        np.testing.assert_array_equal(got, want)


def test_chains_one_after_another_are_each_one_table_read() -> None:
    """A table's tensor may itself come from a table (two SiLUs with a transpose
    between): the second read reads the first's rewritten result, not the old chain."""
    x = ir.var("x", shape=(4, 16), dtype="uint8")
    first = _qsilu(x, "uint8", (0.05, 1 / 256, 0.03), (128, 0, 10))
    second = _qsilu(op.transpose(first, axes=[1, 0]), "uint8", (0.03, 1 / 256, 0.02), (10, 0, 7))
    fn = _prepared(ir.Function([x], second))
    out = pm.passes.TabulateByteFunctions()(ir.IRModule.from_expr(fn))
    assert sorted(_ops(out["main"])) == ["take", "take", "transpose"]
    value = (np.arange(64, dtype=np.uint8) * 4).reshape(4, 16)
    np.testing.assert_array_equal(ir.interpret(out, value), ir.interpret(fn, value))
