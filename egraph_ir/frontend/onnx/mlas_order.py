"""A float convolution summed in the order ONNX Runtime's MLAS sums it, so that a QDQ group
ONNX Runtime runs in float (ort_islands.py) rounds as it does there.

MLAS computes a float Conv as a product of the filters (F x K, K = channels * kernel taps)
and the input's patches (K x N, N = output pixels, k running over channel, then kernel row,
then column): the output pixels are split into pieces (by thread, see `column_pieces`),
and in each piece K into slices of `stride_k`: each slice is a chain of fused multiply-
adds from zero, added to the running sum; the bias comes last. Summed as one chain instead,
about 6 of 200,000 outputs of a ResNet layer quantize one step apart, and a quantised
network amplifies such steps. Here the patches are built with slices of the padded input,
each (piece, slice) is one `dense` (a single chain from zero in our product kernels), and
the partial sums are added in MLAS's order. Read from MLAS's convolve.cpp and sgemm.cpp
(ONNX Runtime 1.16-1.23); checked against ONNX Runtime in tests/egraph_ir/frontend/
test_onnx_quantized.py.
"""

from __future__ import annotations

import os

from ... import op
from ...expr import Expr

STRIDE_N, STRIDE_K = 128, 128  # MLAS_SGEMM_STRIDEN / _STRIDEK
THREAD_ALIGN = 16  # MLAS_SGEMM_STRIDEN_THREAD_ALIGN
THREAD_COMPLEXITY = 64 * 1024  # MLAS_SGEMM_THREAD_COMPLEXITY
MAX_THREADS = 16  # MLAS_MAXIMUM_THREAD_COUNT


def stride_k(n: int, k: int) -> int:
    """MlasSgemmOperation's K slice for a product of n columns and depth k."""
    sn, sk = STRIDE_N, STRIDE_K
    if n >= k:
        while sk // 2 >= k:
            sn, sk = sn * 2, sk // 2
    else:
        while sn > 16 and sn // 2 >= n:
            sn, sk = sn // 2, sk * 2
    return sk


def _partition(total: int, parts: int) -> list[tuple[int, int]]:
    """MlasPartitionWork: (start, count) of each part."""
    each, extra = divmod(total, parts)
    return [
        ((each + 1) * i, each + 1) if i < extra else (each * i + extra, each) for i in range(parts)
    ]


def _gemm_pieces(m: int, n: int, k: int, threads: int) -> list[tuple[int, int]]:
    """MlasGemm's split of the n columns across threads (none when it splits rows)."""
    target = min(int(m * n * k / THREAD_COMPLEXITY) + 1, threads)
    if n <= m:
        return [(0, n)]
    blocked = -(-n // THREAD_ALIGN)
    pieces = _partition(blocked, min(target, blocked))
    return [
        (s * THREAD_ALIGN, min(n - s * THREAD_ALIGN, c * THREAD_ALIGN)) for s, c in pieces if c
    ]


def column_pieces(
    filters: int, n: int, k: int, pointwise: bool, threads: int
) -> list[tuple[int, int]]:
    """The pieces of the output pixels MLAS sums separately (start, count), for one image
    and one group: MlasConvPrepare's choice of algorithm and its thread split."""
    if pointwise or filters > n:  # GemmDirect / ExpandThenGemm: a threaded MlasGemm
        return _gemm_pieces(filters, n, k, threads)
    complexity = filters * n * k
    target = MAX_THREADS
    if complexity < THREAD_COMPLEXITY * MAX_THREADS:
        target = int(complexity / THREAD_COMPLEXITY) + 1
    target = min(target, threads)
    stride = -(-n // target)
    if target > 1:
        stride = -(-stride // THREAD_ALIGN) * THREAD_ALIGN
        if stride >= n:
            stride = n
    return [(s, min(stride, n - s)) for s in range(0, n, stride)]


def default_threads() -> int:
    """The threads ONNX Runtime's default session uses: one per core it may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _output_size(spatial: list[int], kernel: tuple[int, int], window: dict) -> tuple[int, int]:
    pads = window["padding"]
    sizes = []
    for axis in range(2):
        span = window["dilation"][axis] * (kernel[axis] - 1) + 1
        total = spatial[axis] + pads[axis] + pads[axis + 2] - span
        sizes.append(total // window["strides"][axis] + 1)
    return sizes[0], sizes[1]


def _patches(x: Expr, channels: int, size: tuple[int, int], window: dict) -> Expr:
    """x (1, C, H, W) as its patches (OH * OW, C * KH * KW), k = (c, kh, kw)."""
    (kh, kw), (sh, sw), (dh, dw) = window["kernel"], window["strides"], window["dilation"]
    top, left, bottom, right = window["padding"]
    padded = op.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh, ow = size
    taps = []
    for i in range(kh):
        for j in range(kw):
            begin = (0, 0, i * dh, j * dw)
            end = (1, channels, i * dh + (oh - 1) * sh + 1, j * dw + (ow - 1) * sw + 1)
            taps.append(op.expand_dims(op.strided_slice(padded, begin, end, (1, 1, sh, sw)), 2))
    stacked = taps[0] if len(taps) == 1 else op.concatenate(*taps, axis=2)  # (1, C, T, OH, OW)
    rows = op.transpose(stacked, (0, 3, 4, 1, 2))  # (1, OH, OW, C, T)
    return op.reshape(rows, (oh * ow, channels * kh * kw))


def mlas_conv2d(
    x: Expr,
    weights: Expr,
    bias: Expr | None,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    window: dict,
    threads: int,
) -> Expr:
    """conv2d (+ bias) of one image, groups 1, summed in MLAS's order; shapes are x's
    and the weights'."""
    (_, channels, *spatial), (filters, _, kh, kw) = shapes
    size = _output_size(spatial, (kh, kw), window)
    k, n = channels * kh * kw, size[0] * size[1]
    patches = _patches(x, channels, size, window)
    matrix = op.reshape(weights, (filters, k))
    pointwise = (kh, kw) == (1, 1) and window["strides"] == (1, 1) and not any(window["padding"])
    pieces = []
    for start, count in column_pieces(filters, n, k, pointwise, threads):
        rows = op.strided_slice(patches, (start, 0), (start + count, k))
        step = stride_k(count, k)
        total: Expr | None = None
        for k0 in range(0, k, step):
            k1 = min(k, k0 + step)
            part = op.dense(
                op.strided_slice(rows, (0, k0), (count, k1)),
                op.strided_slice(matrix, (0, k0), (filters, k1)),
            )
            total = part if total is None else op.add(part, total)
        assert total is not None
        pieces.append(total)
    out = pieces[0] if len(pieces) == 1 else op.concatenate(*pieces, axis=0)  # (N, F)
    if bias is not None:
        out = op.add(out, bias)
    return op.reshape(op.transpose(out, (1, 0)), (1, filters, *size))
