"""Library routines for anchors: OpenBLAS (through numpy) for products and convolutions.

Each routine is `fn(inputs, attrs, out)` and writes its result into `out` (a view into the
planned arena), so the fused epilogue can run over it in place. Naive JIT loops reach only
15-30% of OpenBLAS on this machine (research/perf/FINDINGS.md); a register-blocked schedule
of our own is future work, and these routines are what it has to beat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from egraph_ir.attrs import Attrs
from egraph_ir.registry import get_op

Routine = Callable[[list[np.ndarray], dict[str, Any], np.ndarray], None]


def _matmul(args: list[np.ndarray], attrs: dict[str, Any], out: np.ndarray) -> None:
    np.matmul(args[0], args[1], out=out)


def _dense(args: list[np.ndarray], attrs: dict[str, Any], out: np.ndarray) -> None:
    np.matmul(args[0], args[1].T, out=out)


def _batch_matmul(args: list[np.ndarray], attrs: dict[str, Any], out: np.ndarray) -> None:
    a, b = args
    if attrs.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if attrs.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    np.matmul(a, b, out=out)


def _conv2d(args: list[np.ndarray], attrs: dict[str, Any], out: np.ndarray) -> None:
    """im2col by one strided copy into (C*kh*kw, N*oh*ow), then one GEMM with the weights
    as (O, C*kh*kw): for a batch of one the product is already NCHW and lands in `out`."""
    x, w = args
    if attrs["groups"] != 1:
        out[...] = get_op("conv2d").evaluate(args, Attrs(attrs))
        return
    top, left, bottom, right = attrs["padding"]
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilation"]
    o, c, kh, kw = w.shape
    if top or left or bottom or right:
        x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    windows = sliding_window_view(x, (span_h, span_w), axis=(2, 3))[
        :, :, ::sh, ::sw, ::dh, ::dw
    ]  # (n, c, oh, ow, kh, kw)
    n, _, oh, ow = windows.shape[:4]
    cols = np.ascontiguousarray(windows.transpose(1, 4, 5, 0, 2, 3)).reshape(c * kh * kw, -1)
    weights = w.reshape(o, c * kh * kw)
    if n == 1:
        np.matmul(weights, cols, out=out.reshape(o, oh * ow))
    else:
        out[...] = (weights @ cols).reshape(o, n, oh, ow).transpose(1, 0, 2, 3)


def conv2d_from_columns(args: list[np.ndarray], attrs: dict[str, Any], out: np.ndarray) -> None:
    """The GEMM half of conv2d, after a JIT im2col filled the columns (last argument)."""
    _, w, cols = args
    o = w.shape[0]
    n, _, oh, ow = out.shape
    weights = w.reshape(o, -1)
    if n == 1:
        np.matmul(weights, cols, out=out.reshape(o, oh * ow))
    else:
        out[...] = (weights @ cols).reshape(o, n, oh, ow).transpose(1, 0, 2, 3)


def _reference(name: str) -> Routine:
    op = get_op(name)

    def run(args: list[np.ndarray], attrs: dict[str, Any], out: np.ndarray) -> None:
        out[...] = op.evaluate(args, Attrs(attrs))

    return run


ROUTINES: dict[str, Routine] = {
    "matmul": _matmul,
    "dense": _dense,
    "batch_matmul": _batch_matmul,
    "conv2d": _conv2d,
    "max_pool2d": _reference("max_pool2d"),
    "avg_pool2d": _reference("avg_pool2d"),
    "global_avg_pool2d": _reference("global_avg_pool2d"),
}
