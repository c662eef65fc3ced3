"""ExpandMlasOrder: each conv2d_mlas (egraph_ir/op/mlas.py) as the patches, products and
sums that compute it in MLAS's order, just before code generation: the rule passes before
saw one op, not hundreds (a 5x5 depthwise layer is 25 taps). The products are
`matmul_mlas` or `dense_mlas` (their K slices summed as MLAS does by codegen's kernels;
see _full). Where the filters are one per channel, each tap's product is
rounded by itself (asked for through float64, where the product is exact) so that no
multiply-add absorbs it: MLAS's one-row kernel adds rounded products."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_ir import op
from egraph_ir.expr import Call, Constant, Expr, Function
from egraph_ir.module import IRModule
from egraph_ir.op.mlas import column_pieces, is_pointwise, m1_groups, stride_k
from egraph_ir.op.nn import conv_geometry
from egraph_ir.types import TensorType
from egraph_ir.visitor import rewrite_calls

from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record

PANEL = 16  # matmul_mlas's vectors: whole ones of pixels
# matmul_mlas reads its pixels' rows in place, k after k a row apart: past this depth a
# panel of them no longer stays in L1 and the packed dense_mlas (plus a transpose) wins
# (ResNet-18's 3x3 layers, K = 576: 57-70 against 111-129 GFLOP/s on Zen 3)
SHALLOW = 256


class _Window:
    """A conv2d_mlas call's geometry and its padded input's taps."""

    def __init__(self, call: Call, x: Expr) -> None:
        xt, wt = (a.checked_type for a in call.args[:2])
        assert isinstance(xt, TensorType) and isinstance(wt, TensorType)
        self.attrs = call.attrs
        (_, self.filters, self.oh, self.ow), pads, self.strides, self.dilation = conv_geometry(
            xt.shape, wt.shape, call.attrs
        )
        self.channels, self.kernel = int(xt.shape[1]), (int(wt.shape[2]), int(wt.shape[3]))
        self.w_shape = tuple(wt.shape)
        top, left, bottom, right = pads
        widths = ((0, 0), (0, 0), (top, bottom), (left, right))
        self.padded = op.pad(x, widths) if any(pads) else x  # no copy where nothing is added

    def tap(self, i: int, j: int) -> Expr:
        """The input under kernel tap (i, j) at every output: (1, C, OH, OW)."""
        (sh, sw), (dh, dw) = self.strides, self.dilation
        begin = (0, 0, i * dh, j * dw)
        end = (1, self.channels, i * dh + (self.oh - 1) * sh + 1, j * dw + (self.ow - 1) * sw + 1)
        return op.strided_slice(self.padded, begin, end, (1, 1, sh, sw))


def _slice(weight: Expr, shape: tuple[int, ...], begin: tuple, end: tuple) -> Expr:
    """weight reshaped to `shape`, then sliced: a constant when the weight is one."""
    if isinstance(weight, Constant):
        index = tuple(slice(b, e) for b, e in zip(begin, end, strict=True))
        return Constant(np.ascontiguousarray(weight.data.reshape(shape)[index]))
    return op.strided_slice(op.reshape(weight, shape), begin, end)


def _full(win: _Window, weight: Expr, threads: int) -> Expr:
    """One group: the filters times the patches in MLAS's K slices. A column's sums depend
    only on its piece's slice size, so where every piece has the same one, one product
    over all columns: the filters (F, K) times the patches (K, N) as they lie, NCHW rows
    out (matmul_mlas), when N fills vectors of PANEL and K is SHALLOW; else the patches
    transposed (N, K) times the filters (dense_mlas)."""
    kh, kw = win.kernel
    taps = [op.expand_dims(win.tap(i, j), 2) for i in range(kh) for j in range(kw)]
    stacked = taps[0] if len(taps) == 1 else op.concatenate(*taps, axis=2)  # (1, C, T, OH, OW)
    n, k = win.oh * win.ow, win.channels * kh * kw
    pieces = column_pieces(win.filters, n, k, is_pointwise(win.w_shape, win.attrs), threads)
    slices = [(start, count, stride_k(count, k)) for start, count in pieces]
    if len({step for *_, step in slices}) == 1:
        slices = [(0, n, slices[0][2])]
    shape = (1, win.filters, win.oh, win.ow)
    if len(slices) == 1 and n % PANEL == 0 and k <= SHALLOW and isinstance(weight, Constant):
        filters = Constant(weight.data.reshape(win.filters, k))
        product = op.matmul_mlas(filters, op.reshape(stacked, (k, n)), stride_k=slices[0][2])
        return op.reshape(product, shape)
    patches = op.reshape(op.transpose(stacked, (0, 3, 4, 1, 2)), (n, k))
    out = _patches_times_filters(patches, weight, win.filters, k, slices)
    return op.reshape(op.transpose(out, (1, 0)), shape)


def _patches_times_filters(
    patches: Expr, weight: Expr, filters: int, k: int, slices: list[tuple[int, int, int]]
) -> Expr:
    """(N, F): a dense_mlas per slice (start, count, K slice) of the patches' (N, k) rows
    (the packed kernel pads the filters to whole panels itself)."""
    matrix = (
        Constant(weight.data.reshape(filters, k))
        if isinstance(weight, Constant)
        else op.reshape(weight, (filters, k))
    )
    products = []
    for start, count, step in slices:
        piece = (
            patches
            if len(slices) == 1
            else op.strided_slice(patches, (start, 0), (start + count, k))
        )
        products.append(op.dense_mlas(piece, matrix, stride_k=step))
    return products[0] if len(products) == 1 else op.concatenate(*products, axis=0)


def _depthwise(win: _Window, weight: Expr) -> Expr:
    """One filter per channel: taps four at a time, products rounded, added in order, all
    in one elementwise kernel. A product is float32(float64(x) * float64(w)), the float32
    product (the float64 one is exact), which the code generator emits as a float32
    multiply that no multiply-add may absorb (codegen/llvm/emit.py)."""
    kh, kw = win.kernel
    f, taps = win.filters, kh * kw

    def product(t: int) -> Expr:
        i, j = divmod(t, kw)
        column = _slice(weight, (1, f, kh, kw), (0, 0, i, j), (1, f, i + 1, j + 1))
        return op.rounded_product(win.tap(i, j), column)

    total: Expr | None = None
    start = 0
    for size in m1_groups(taps):
        group = product(start)
        for t in range(start + 1, start + size):
            group = op.add(group, product(t))
        total = group if total is None else op.add(group, total)
        start += size
    assert total is not None
    return total


def expanded(call: Call, args: list[Expr]) -> Expr:
    """The conv2d_mlas call computed by ordinary ops."""
    x, weight, bias = args
    win = _Window(call, x)
    if int(call.attrs["groups"]) > 1:
        out = _depthwise(win, weight)
    else:
        out = _full(win, weight, int(call.attrs["threads"]))
    return op.add(out, op.reshape(bias, (1, win.filters, 1, 1)))


@register_pass
@dataclass(frozen=True)
class ExpandMlasOrder(FunctionPass):
    """conv2d_mlas as ordinary ops (see the module docstring)."""

    idempotent = True
    opt_level = 0
    required = ("InferType",)

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        calls: list[Call] = []

        def expand(call: Call, args: list[Expr], lookup: object) -> Expr:
            calls.append(call)
            return expanded(call, args)

        out = rewrite_calls(fn, {"conv2d_mlas"}, expand)
        record(MlasReport(expanded=len(calls)))
        return out


@dataclass(frozen=True, slots=True)
class MlasReport(PassReport):
    """conv2d_mlas calls expanded in one function."""

    expanded: int
