"""A float32 product asked for through float64 (float32(float64(a) * float64(b))) is rounded
by itself: no multiply-add absorbs it, as MLAS's one-row kernel adds rounded products
(passmgr/passes/expand_mlas.py). LLVM would otherwise shrink it to a float32 multiply and
fuse that with the add into one FMA, which rounds once."""

from __future__ import annotations

import numpy as np

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op


def test_a_product_rounded_through_float64_is_not_fused_into_the_add() -> None:
    t = ir.TensorType((64,), "float32")
    a, b, c = (ir.var(n, t) for n in "abc")
    wide = op.multiply(op.cast(a, dtype="float64"), op.cast(b, dtype="float64"))
    body = op.add(op.cast(wide, dtype="float32"), c)
    with pm.PassContext(opt_level=2):
        exe = codegen.build(ir.IRModule.from_expr(ir.Function([a, b, c], body)))
    rng = np.random.default_rng(0)
    x = (1 + rng.integers(1, 4096, 64) * 2.0**-12).astype(np.float32)
    y = (1 + rng.integers(1, 4096, 64) * 2.0**-12).astype(np.float32)
    z = np.full(64, -1.0, np.float32)
    fused = (x.astype(np.float64) * y + z).astype(np.float32)  # one rounding: an FMA
    want = x * y + z
    assert (fused != want).sum() > 0  # the inputs tell the two apart
    np.testing.assert_array_equal(exe.run(x, y, z), want)
