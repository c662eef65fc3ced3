"""The compute definition of im2col (egraph_ir/op/layout.py): a convolution's windows as
rows in MLAS's (kernel row, column, channel) order, which OnnxRuntimeSums writes for a
quantised convolution of an odd channel count. Registered into COMPUTE when
codegen/lower/group.py imports this module."""

from __future__ import annotations

from egraph_ir.op.nn import conv_geometry

from ...loop_ir import Bin, LExpr, Select, clamp, idx
from .definitions import Ctx, Index, compute


@compute("im2col")
def _im2col(ctx: Ctx) -> LExpr:
    """Every index of the (rows, KH, KW, C) result a loop variable: the row's division
    and the window's offsets are hoisted out of the inner loops."""
    shape = ctx.in_types[0].shape
    kh, kw = ctx.attrs["kernel_size"]
    attrs = dict(ctx.attrs, groups=1)
    (_, _, oh, ow), (top, left, _, _), (sh, sw), (dh, dw) = conv_geometry(
        shape, (1, shape[1], kh, kw), attrs
    )
    h, w = shape[2], shape[3]
    row, i, j, channel = ctx.index.multi()
    n, pixel = row // (oh * ow), row % (oh * ow)
    y = pixel // ow * sh + i * dh - top
    x = pixel % ow * sw + j * dw - left
    inside: LExpr | None = None
    for at, size in ((y, h), (x, w)):
        within = Bin("bool", "and", Bin("bool", "ge", at, idx(0)), Bin("bool", "lt", at, idx(size)))
        inside = within if inside is None else Bin("bool", "and", inside, within)
    assert inside is not None
    multi = [n, channel, clamp(y, 0, h - 1), clamp(x, 0, w - 1)]
    value = ctx.readers[0](Index(shape, multi=multi))
    pad = float(ctx.attrs["pad_value"])
    fill = ctx.c(pad if ctx.out.dtype.startswith("float") else int(pad))
    return Select(ctx.out.dtype, inside, value, fill)
