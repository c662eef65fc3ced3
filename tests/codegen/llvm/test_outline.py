"""Loops emitted as functions of their own (codegen/llvm/outline.py): what they take from
their caller, and kernels whose transcendental epilogues are outlined computing what the
interpreter does (the packed product, the direct and channel-panel convolutions, the blocked pointwise one
into blocked and NCHW results, batch items included)."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.llvm.outline import free_names
from codegen.loop_ir import (
    INDEX,
    Assign,
    Bin,
    Const,
    Declare,
    For,
    Load,
    LoopVar,
    Ref,
    Store,
    Un,
    heavy,
)
from egraph_ir import op


def test_free_names_are_what_the_loop_reads_from_around_it() -> None:
    i, j, b = (LoopVar(INDEX, k) for k in ("i", "j", "b"))
    value = Bin("float32", "add", Load("float32", "x", b * 4 + i), Ref("float32", "bias"))
    loop = For("i", 4, [
        Declare("t", value),
        For("j", 2, [Store("out", (b * 4 + i) * 2 + j, Ref("float32", "t"))]),
    ])  # fmt: skip
    free = free_names(loop)
    assert free.loop_vars == ("b",) and free.locals == ("bias",)


def test_an_outlined_loop_may_not_assign_its_callers_locals() -> None:
    loop = For("i", 4, [Assign("acc", Const("float32", 1.0))])
    with pytest.raises(ValueError, match="assigns acc"):
        free_names(loop)


def test_heavy_means_transcendental_math() -> None:
    x = Load("float32", "x", LoopVar(INDEX, "i"))
    assert heavy([Store("out", LoopVar(INDEX, "i"), Un("float32", "exp", x))])
    assert not heavy([Store("out", LoopVar(INDEX, "i"), Bin("float32", "max", x, x))])


def _silu(y: ir.Expr) -> ir.Expr:
    return op.multiply(y, op.sigmoid(y))


def _gelu(y: ir.Expr) -> ir.Expr:
    half = ir.const(np.float32(0.5))
    root = ir.const(np.float32(1 / np.sqrt(2)))
    one = ir.const(np.float32(1.0))
    return op.multiply(op.multiply(y, half), op.add(op.erf(op.multiply(y, root)), one))


def _case(name: str, rng: np.random.Generator) -> tuple[ir.Function, str]:
    """A model whose kernel of kind `variant` ends in a transcendental epilogue."""
    if name == "gemm":
        x = ir.var("x", shape=(37, 64))
        w = ir.const(rng.standard_normal((96, 64)).astype("float32") / 8)
        return ir.Function([x], _gelu(op.dense(x, w))), "packed"
    if name in ("direct", "channels"):  # by the output's width: wide rows or planes
        side = 17 if name == "direct" else 13
        x = ir.var("x", shape=(2, 8, side, side))
        outs = 24 if name == "direct" else 32
        w = ir.const(rng.standard_normal((outs, 8, 3, 3)).astype("float32") / 8)
        conv = op.conv2d(x, w, strides=(2, 2) if name == "direct" else (1, 1), padding=(1,))
        return ir.Function([x], op.sigmoid(conv)), name
    blocked = name == "pointwise-blocked"
    x = ir.var("x", shape=(2, 3, 11, 11, 16))
    w = ir.const(rng.standard_normal((48 if blocked else 40, 48, 1, 1)).astype("float32") / 8)
    out = op.conv2d_nchwc(x, w, out_layout="NCHW16c" if blocked else "NCHW")
    return ir.Function([x], _silu(out)), "nchwc-pointwise"


@pytest.mark.parametrize(
    "name", ["gemm", "direct", "channels", "pointwise-blocked", "pointwise-nchw"]
)
def test_kernels_with_outlined_epilogues_equal_the_interpreter(name: str) -> None:
    rng = np.random.default_rng(7)
    fn, variant = _case(name, rng)
    with pm.PassContext(opt_level=2, config={"codegen.num_threads": 2}):
        exe = codegen.build(fn)
    assert variant in [k.variant for k in exe.graph.kernels()]
    assert '.part1"' in exe.get_source()  # the epilogue is a function of its own
    x = fn.params[0]
    inputs = {"x": rng.standard_normal(tuple(x.type_annotation.shape)).astype("float32")}
    # the inline exp and erf are within 2e-7 and 6e-7 (tests/codegen/llvm/test_mathlib.py);
    # the sums' order differs from the interpreter's: 1e-5 relative for 64-term sums
    np.testing.assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), rtol=1e-5, atol=2e-6)
