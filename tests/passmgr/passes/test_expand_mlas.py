"""ExpandMlasOrder: a conv2d_mlas compiled is its reference (MLAS's order of sums) bit for
bit, whatever its filter and pixel counts: one matmul_mlas over every pixel (784 and 144
pixels), dense_mlas on 40 filters (81 pixels: the packed kernel pads them to whole panels),
and one dense_mlas per piece of MLAS's thread split where the pieces slice K apart (80 and
64 pixels, K = 144: slices of 128 and 256)."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir.op.mlas import conv2d_mlas_ref


@pytest.mark.parametrize(
    "channels,filters,size,kernel",
    [(144, 40, 28, 1), (24, 40, 9, 3), (32, 24, 12, 1), (16, 40, 12, 3)],
    ids=["pointwise-40", "k216-40", "pointwise-24", "two-pieces-sliced-apart"],
)
def test_compiled_conv2d_mlas_is_its_reference(
    channels: int, filters: int, size: int, kernel: int
) -> None:
    rng = np.random.default_rng(filters + kernel)
    x = (rng.integers(-128, 128, (1, channels, size, size)) * 0.0173).astype(np.float32)
    w = (rng.integers(-128, 128, (filters, channels, kernel, kernel)) * 0.0021).astype(np.float32)
    b = rng.standard_normal(filters).astype(np.float32)
    attrs = dict(strides=(1, 1), padding=(kernel // 2,) * 4, dilation=(1, 1), groups=1, threads=2)
    data = ir.var("x", ir.TensorType(x.shape, "float32"))
    call = ir.op.conv2d_mlas(data, ir.const(w), ir.const(b), **attrs)
    with pm.PassContext(opt_level=2):
        exe = codegen.build(ir.IRModule.from_expr(ir.Function([data], call)))
    want = conv2d_mlas_ref(x, w, b, **attrs)
    assert int((exe.run(x) != want).sum()) == 0
