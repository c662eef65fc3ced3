"""conv2d_mlas, dense_mlas and matmul_mlas: a float convolution and products summed in the
order ONNX Runtime's MLAS sums them, so that a quantised group ONNX Runtime runs in float
(frontend/onnx/ort_islands.py) rounds as it does there; conv2d_mlas is one op through the
rule passes, expanded into patches and those products just before code generation
(passmgr/passes/expand_mlas.py).

MLAS computes a float Conv of one image and one group as a product of the filters (F x K,
K = channels * kernel taps) and the input's patches (K x N, N = output pixels, k over
channel, then kernel row, then column). The pixels are split into pieces (its thread split,
`column_pieces`) and in each piece K into slices of `stride_k`: each slice a chain of fused
multiply-adds from zero, added to the running sum; the bias last. A group of one filter
(depthwise) goes to its one-row kernel instead: four taps at a time, each four's products
rounded and added left to right (no fused multiply-add), then added to the running sum.
Summed as one chain instead, about 6 of 200,000 outputs of a ResNet layer quantize one
step apart, and a quantised network amplifies such steps. Read from MLAS's convolve.cpp,
sgemm.cpp and SgemmKernelM1Avx.S (ONNX Runtime 1.16-1.23); tests/egraph_ir/frontend/
test_onnx_quantized.py checks it against ONNX Runtime bit for bit.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable

import llvmlite.binding as llvm
import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, ShapeError, register_op
from ..types import TensorType, Type
from ._common import require_dtype, size_of
from .nn import CONV_ATTRS, conv_geometry, windows
from .qnn import fma32

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
    return [(s * THREAD_ALIGN, min(n - s * THREAD_ALIGN, c * THREAD_ALIGN)) for s, c in pieces if c]


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
    stride = min(stride, n)
    return [(s, min(stride, n - s)) for s in range(0, n, stride)]


def m1_groups(depth: int) -> list[int]:
    """How MLAS's one-row product walks its depth: fours, then a two, then a one."""
    fours, rest = divmod(depth, 4)
    return [4] * fours + ([2] if rest >= 2 else []) + ([1] if rest % 2 else [])


@functools.cache
def onnxruntime_saturates() -> bool:
    """Whether ONNX Runtime's uint8 x int8 products on this CPU sum byte products in
    saturating int16 pairs (vpmaddubsw: x86 without AVX-512 VNNI or AVX-VNNI); with VNNI,
    and off x86, they are exact (egraph_ir/op/qnn.py: PAIRS)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    features = llvm.get_host_cpu_features()
    return not (features.get("avx512vnni", False) or features.get("avxvnni", False))


@functools.cache
def onnxruntime_threads() -> int:
    """The threads ONNX Runtime's default session uses: one per physical core (hyper-
    threads share one), of the CPUs this process may run on."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = set()
    for cpu in cpus:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        try:
            with (
                open(f"{topology}/physical_package_id") as package,
                open(f"{topology}/core_id") as core,
            ):
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus) or os.cpu_count() or 1


def is_pointwise(w_shape: tuple[int, ...], attrs: Attrs | dict) -> bool:
    """MLAS multiplies a 1x1, stride 1, unpadded convolution's input directly."""
    return (
        tuple(w_shape[2:]) == (1, 1)
        and tuple(attrs["strides"]) == (1, 1)
        and not any(attrs["padding"])
    )


def _infer(args: list[TensorType], attrs: Attrs) -> Type:
    x, w, b = args
    for t, what in ((x, "data"), (w, "weight"), (b, "bias")):
        require_dtype(t, ("float32",), what)
    out, *_ = conv_geometry(x.shape, w.shape, attrs)
    groups = int(attrs["groups"])
    if out[0] != 1 or not (groups == 1 or groups == x.shape[1] == w.shape[0]):
        raise ShapeError(f"conv2d_mlas: one image, one group or depthwise, got {x}, {w}")
    if tuple(b.shape) != (w.shape[0],):
        raise ShapeError(f"conv2d_mlas: bias of shape ({w.shape[0]},), got {b}")
    return TensorType(out, "float32")


def conv2d_mlas_ref(x, w, b, strides, padding, dilation, groups, threads) -> np.ndarray:
    """The convolution with MLAS's sums (see the module docstring)."""
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    (_, f, oh, ow), (pt, pl, pb, pr), (sh, sw), (dh, dw) = conv_geometry(x.shape, w.shape, attrs)
    kh, kw = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = windows(xp, kh, kw, sh, sw, dh, dw, oh, ow)[0]  # (C, OH, OW, KH, KW)
    taps = win.reshape(*win.shape[:3], kh * kw)  # tap t = (t // kw, t % kw)
    if groups > 1:  # depthwise: the one-row kernel, per channel
        wt = w[:, 0].reshape(f, kh * kw)
        total, start = None, 0
        for size in m1_groups(kh * kw):
            part = None
            for t in range(start, start + size):
                product = (taps[..., t] * wt[:, t, None, None]).astype(np.float32)
                part = product if part is None else (part + product).astype(np.float32)
            total = part if total is None else (part + total).astype(np.float32)
            start += size
        return (total + b[:, None, None]).astype(np.float32)[None]
    patches = taps.transpose(1, 2, 0, 3).reshape(oh * ow, -1)  # (N, K), k = (c, kh, kw)
    matrix = w.reshape(f, -1)
    k, n = matrix.shape[1], oh * ow
    out = np.zeros((n, f), np.float32)
    for start, count in column_pieces(f, n, k, is_pointwise(w.shape, attrs), threads):
        rows = patches[start : start + count]
        out[start : start + count] = dense_mlas_ref(rows, matrix, stride_k(count, k))
    return (out.T + b[:, None]).astype(np.float32).reshape(1, f, oh, ow)


def dense_mlas_ref(x: np.ndarray, w: np.ndarray, stride_k: int) -> np.ndarray:
    """x (M, K) times w (N, K) transposed, summed as MLAS's SGEMM kernel sums: K in slices
    of stride_k, each a chain of fused multiply-adds from zero, added to the running sum."""
    total = np.zeros((x.shape[0], w.shape[0]), np.float32)
    for k0 in range(0, x.shape[1], stride_k):
        acc = np.zeros_like(total)
        for q in range(k0, min(x.shape[1], k0 + stride_k)):
            acc = fma32(x[:, q, None], w[None, :, q], acc)
        total = acc if k0 == 0 else (acc + total).astype(np.float32)
    return total


def matmul_mlas_ref(a: np.ndarray, b: np.ndarray, stride_k: int) -> np.ndarray:
    """a (M, K) @ b (K, N) in MLAS's order: dense_mlas's sums, transposed."""
    return dense_mlas_ref(np.ascontiguousarray(b.T), a, stride_k).T


def _product_infer(name: str, operands: str, k_of_b: int) -> Callable[..., Type]:
    """The type relation of a float32 product a (M, K) by b, b being (N, K) (k_of_b 1:
    dense_mlas) or (K, N) (k_of_b 0: matmul_mlas); `operands` names them in errors."""

    def infer(args: list[TensorType], attrs: Attrs) -> Type:
        a, b = args
        for t, what in zip(args, operands.split(" and "), strict=True):
            require_dtype(t, ("float32",), what.split(" ")[0])
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[k_of_b]:
            raise ShapeError(f"{name} needs {operands}, got {a}, {b}")
        if int(attrs["stride_k"]) < 1:
            raise ShapeError(f"{name}: stride_k must be positive, got {attrs['stride_k']}")
        return TensorType((a.shape[0], b.shape[1 - k_of_b]), "float32")

    return infer


def _product_macs(args: list[TensorType], out: Type, attrs: Attrs) -> float:
    """2 x outputs x K (a's columns, for both products)."""
    assert isinstance(out, TensorType)
    return 2.0 * size_of(out.shape) * args[0].shape[1]


def _macs(args: list[TensorType], out: Type, attrs: Attrs) -> float:
    """2 x outputs x a filter's weights."""
    assert isinstance(out, TensorType)
    return 2.0 * size_of(out.shape) * size_of(args[1].shape[1:])


register_op(
    Op(
        "conv2d_mlas",
        ("data", "weight", "bias"),
        _infer,
        conv2d_mlas_ref,
        OpPattern.OPAQUE,
        _macs,
        (*CONV_ATTRS, AttrSpec("threads", "int", 1)),
        doc="conv2d + bias of one image summed in ONNX Runtime's MLAS order (threads: its"
        " session's)",
    )
)

register_op(
    Op(
        "dense_mlas",
        ("data", "weight"),
        _product_infer("dense_mlas", "data (M, K) and weight (N, K)", 1),
        dense_mlas_ref,
        OpPattern.OUT_ELEMWISE_FUSABLE,
        _product_macs,
        (AttrSpec("stride_k", "int", STRIDE_K),),
        doc="x · Wᵀ summed in MLAS's order (slices of stride_k, each a chain of FMAs)",
    )
)

register_op(
    Op(
        "matmul_mlas",
        ("a", "b"),
        _product_infer("matmul_mlas", "a (M, K) and b (K, N)", 0),
        matmul_mlas_ref,
        OpPattern.OUT_ELEMWISE_FUSABLE,
        _product_macs,
        (AttrSpec("stride_k", "int", STRIDE_K),),
        doc="a @ b summed in MLAS's order (slices of stride_k, each a chain of FMAs)",
    )
)
