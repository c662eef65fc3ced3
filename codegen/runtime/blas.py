"""Products through BLAS, inside the executable's one thread budget.

The BLAS is the OpenBLAS of the `scipy-openblas32` package: a copy of its own, separate
from numpy's, kept at one thread. Threads come only from the runtime, which splits a
product into row (or column, or batch) blocks and runs one single-threaded GEMM per block.
So nothing spins between kernels (numpy's OpenBLAS keeps its workers busy-waiting after
each call, which took a core from the next kernel and made latency swing 10-80x when
another process was busy), and numpy's own thread settings stay the user's.

A `Product` is a GEMM described once at compile time: sizes, transposes, leading
dimensions and, for batched or broadcast products, the element offsets of each item.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from egraph_ir.dims import DimLike
from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call
from egraph_ir.registry import Op
from egraph_ir.types import TensorType

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
BLAS_DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class Block:
    """One GEMM call: element offsets into A, B, C and its m x n extent."""

    a: int
    b: int
    c: int
    m: int
    n: int


@dataclass(frozen=True)
class Product:
    """C[item] = op(A[item]) @ op(B[item]) for each batch item, row-major."""

    dtype: str
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    items: tuple[tuple[int, int, int], ...]  # element offsets (a, b, c) of each batch item

    @property
    def lda(self) -> int:
        return self.m if self.trans_a else self.k

    @property
    def ldb(self) -> int:
        return self.k if self.trans_b else self.n

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * len(self.items)

    def blocks(self, parts: int) -> list[Block]:
        """The product cut into about `parts` independent GEMMs (batch, rows or columns)."""
        m, n = self.m, self.n
        if len(self.items) >= parts or parts <= 1:
            return [Block(a, b, c, m, n) for a, b, c in self.items]
        per_item = max(1, parts // len(self.items))
        out = []
        for a, b, c in self.items:
            if m >= n:  # rows of A and C
                cuts = _cuts(m, per_item)
                step_a = 1 if self.trans_a else self.k
                out += [Block(a + r0 * step_a, b, c + r0 * n, r1 - r0, n) for r0, r1 in cuts]
            else:  # columns of B and C
                cuts = _cuts(n, per_item)
                step_b = self.k if self.trans_b else 1
                out += [Block(a, b + c0 * step_b, c + c0, m, c1 - c0) for c0, c1 in cuts]
        return out


def _cuts(extent: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, extent))
    bounds = [extent * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i + 1] > bounds[i]]


def _batch_offsets(
    a_batch: tuple[int, ...], b_batch: tuple[int, ...], a_size: int, b_size: int, c_size: int
) -> tuple[tuple[int, int, int], ...]:
    """numpy broadcasting of the batch axes, as element offsets of each item."""
    shape = np.broadcast_shapes(a_batch, b_batch)
    a_idx = np.broadcast_to(
        np.arange(int(np.prod(a_batch, dtype=np.int64))).reshape(a_batch), shape
    )
    b_idx = np.broadcast_to(
        np.arange(int(np.prod(b_batch, dtype=np.int64))).reshape(b_batch), shape
    )
    return tuple(
        (int(i) * a_size, int(j) * b_size, c * c_size)
        for c, (i, j) in enumerate(zip(a_idx.reshape(-1), b_idx.reshape(-1), strict=True))
    )


@dataclass(frozen=True)
class Gemm:
    """One product's extents (ints or Dims: a symbolic program's sizes) and transposes."""

    dtype: str
    m: DimLike
    n: DimLike
    k: DimLike
    trans_a: bool
    trans_b: bool


@dataclass(frozen=True)
class _Form(Gemm):
    """What product_of and sized_product_of read of a product call: its extents and
    each operand's batch axes."""

    a_batch: tuple[DimLike, ...]
    b_batch: tuple[DimLike, ...]

    @property
    def tall(self) -> bool:
        """B shared by every item and A's items stacked rows: one tall GEMM."""
        return not self.trans_a and all(d == 1 for d in self.b_batch)


def _form(call: Call) -> _Form:
    """A dense (x (..., K) . w (N, K)^T, every leading axis folded into rows), matmul
    (numpy's: 1-D operands become a row / a column) or batch_matmul call's product."""
    assert isinstance(call.op, Op)
    a_t, b_t = call.args[0].checked_type, call.args[1].checked_type
    assert isinstance(a_t, TensorType) and isinstance(b_t, TensorType)
    name, dtype = call.op.name, a_t.dtype
    if name == "dense":
        rows = math.prod(a_t.shape[:-1])
        return _Form(dtype, rows, b_t.shape[0], a_t.shape[-1], False, True, (), ())
    a_shape, b_shape = a_t.shape, b_t.shape
    trans_a = trans_b = False
    if name == "batch_matmul":
        trans_a, trans_b = bool(call.attrs["transpose_a"]), bool(call.attrs["transpose_b"])
    else:
        a_shape = (1, *a_shape) if len(a_shape) == 1 else a_shape
        b_shape = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    m = a_shape[-1] if trans_a else a_shape[-2]
    k = a_shape[-2] if trans_a else a_shape[-1]
    n = b_shape[-2] if trans_b else b_shape[-1]
    return _Form(dtype, m, n, k, trans_a, trans_b, tuple(a_shape[:-2]), tuple(b_shape[:-2]))


def product_of(call: Call) -> Product:
    """The GEMM for a dense, matmul or batch_matmul call (any dtype: the runtime sends
    float32/float64 to BLAS and others to numpy)."""
    f = _form(call)
    m, n, k = int(f.m), int(f.n), int(f.k)
    if f.tall:
        rows = int(math.prod(f.a_batch)) * m
        return Product(f.dtype, rows, n, k, False, f.trans_b, ((0, 0, 0),))
    items = _batch_offsets(f.a_batch, f.b_batch, m * k, k * n, m * n)  # type: ignore[arg-type]
    return Product(f.dtype, m, n, k, f.trans_a, f.trans_b, items)


@dataclass(frozen=True)
class SizedProduct(Gemm):
    """A product whose extents name sizes (a symbolic program's), run by glue that reads
    the sizes (codegen/llvm/entries.py): `count` items, item i at element offsets
    (i * strides[0], i * strides[1], i * strides[2]) of A, B and C (a stride 0: shared)."""

    count: DimLike
    strides: tuple[DimLike, DimLike, DimLike]


def sized_product_of(call: Call) -> SizedProduct | None:
    """The product of a dense, matmul or batch_matmul call whose shapes name sizes, where
    its batch axes are equal in both operands or B has none (else None: it is described
    per size, by product_of)."""
    f = _form(call)
    if f.tall:
        rows = math.prod(f.a_batch) * f.m
        return SizedProduct(f.dtype, rows, f.n, f.k, False, f.trans_b, 1, (0, 0, 0))
    if f.a_batch != f.b_batch:
        return None
    m, n, k = f.m, f.n, f.k
    strides = (m * k, k * n, m * n)
    return SizedProduct(f.dtype, m, n, k, f.trans_a, f.trans_b, math.prod(f.a_batch), strides)


def _library_file() -> str:
    import scipy_openblas32

    libs = sorted(Path(scipy_openblas32.get_lib_dir()).glob("libscipy_openblas*.so*"))
    if not libs:
        raise OSError(f"no OpenBLAS library in {scipy_openblas32.get_lib_dir()}")
    return str(libs[0])


@cache
def library() -> ctypes.CDLL:
    """The BLAS, loaded once and kept at one thread per call."""
    try:
        lib = ctypes.CDLL(_library_file())
    except (ImportError, OSError) as exc:
        raise CodegenError(
            f"products need the scipy-openblas32 package ({exc}); pip install scipy-openblas32"
        ) from None
    lib.scipy_openblas_set_num_threads(1)
    return lib


@cache
def register_symbols() -> str:
    """Give JIT code the BLAS GEMMs and GEMVs as egc_sgemm, egc_dgemm, egc_sgemv and
    egc_dgemv; returns a description for reports."""
    import llvmlite.binding as llvm

    lib = library()
    for ours, theirs in (
        ("egc_sgemm", "scipy_cblas_sgemm"),
        ("egc_dgemm", "scipy_cblas_dgemm"),
        ("egc_sgemv", "scipy_cblas_sgemv"),
        ("egc_dgemv", "scipy_cblas_dgemv"),
    ):
        address = ctypes.cast(getattr(lib, theirs), ctypes.c_void_p).value
        assert address is not None
        llvm.add_symbol(ours, address)
    return "scipy-openblas32, one thread per call"
