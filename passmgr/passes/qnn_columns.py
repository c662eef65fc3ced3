"""A quantised convolution of an odd channel count summed as ONNX Runtime sums it without
VNNI: MLAS lays the input out as im2col columns, k over (kernel row, column, channel),
and adds the uint8 x int8 products of consecutive k in saturating int16 pairs, so with
three channels (an RGB stem) a pair joins the last channel of one tap and the first of
the next. The int8 convolution kernels pair channels within a tap; this writes the columns
and their product instead (CanonicalizeQnn), which the int8 product kernel computes in
those pairs (codegen/lower/kernels/gemm/int8.py).
"""

from __future__ import annotations

import numpy as np

from egraph_ir import op
from egraph_ir.expr import Call, Constant, Expr
from egraph_ir.op.nn import norm_padding
from egraph_ir.types import TensorType

WORD = 4  # k per word of the int8 product kernel: the columns are padded to whole words


def columns_fit(call: Call) -> bool:
    """A one-group qnn_conv2d of uint8 data with an odd channel count, constant int8
    weights of zero point 0, a constant scalar data zero point and no negative padding."""
    x, w, x_zero, w_zero = call.args
    x_t = x.checked_type
    if not (isinstance(x_t, TensorType) and x_t.dtype == "uint8" and x_t.shape[1] % 2):
        return False
    if not all(isinstance(a, Constant) for a in (w, x_zero, w_zero)):
        return False
    assert isinstance(w, Constant) and isinstance(x_zero, Constant)
    assert isinstance(w_zero, Constant)
    return (
        call.attrs["groups"] == 1
        and w.data.dtype == np.int8
        and x_zero.data.size == 1
        and not w_zero.data.any()
        and min(norm_padding(call.attrs["padding"])) >= 0
    )


def as_nchw(call: Call, rows: Expr) -> Expr:
    """A (N * OH * OW, O) result of columns_dense in the call's NCHW shape."""
    n, o, oh, ow = call.checked_type.shape  # type: ignore[attr-defined]
    return op.transpose(op.reshape(rows, newshape=(n, oh, ow, o)), axes=(0, 3, 1, 2))


def columns_dense(call: Call, data: Expr) -> Expr:
    """The saturating qnn_dense of the columns: (N * OH * OW, O) int32, a row per pixel
    (its bias and requantize can follow it there, before the transpose to NCHW)."""
    out_t = call.checked_type
    x_t = call.args[0].checked_type
    w, x_zero = call.args[1:3]  # the weights zero point is 0 (columns_fit)
    assert isinstance(out_t, TensorType) and isinstance(x_t, TensorType)
    assert isinstance(w, Constant) and isinstance(x_zero, Constant)
    n, c = x_t.shape[:2]
    o, _, kh, kw = w.data.shape
    oh, ow = out_t.shape[2:]
    fill = float(np.ravel(x_zero.data)[0])  # MLAS pads with the zero point
    depth = kh * kw * c
    extra = -depth % WORD
    windows = op.im2col(
        data, kernel_size=(kh, kw), strides=call.attrs["strides"],
        padding=call.attrs["padding"], dilation=call.attrs["dilation"], pad_value=fill,
    )  # fmt: skip
    columns = op.reshape(windows, newshape=(n * oh * ow, depth))
    if extra:  # whole words of k, the extra ones zero point bytes times zero weights
        columns = op.pad(columns, pad_width=((0, 0), (0, extra)), pad_value=fill)
    weights = np.zeros((o, depth + extra), np.int8)
    weights[:, :depth] = w.data.transpose(0, 2, 3, 1).reshape(o, depth)
    zero = Constant(np.zeros((), np.int8))
    return op.call("qnn_dense", columns, Constant(weights), x_zero, zero, pairs="saturating")
