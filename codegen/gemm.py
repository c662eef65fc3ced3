"""A register-blocked GEMM micro-kernel for products with constant weights.

`x @ B` (matmul with a constant 2-D B) and `x · Wᵀ` (dense; W is transposed once, at build
time) over x of shape (..., K), viewed as (M, K). Each step keeps MB rows x XV 16-lane
vectors of C in registers and sweeps K: per k, MB broadcasts of x[i, k] and XV loads of
B[k, j:j+16*XV] feed MB*XV fused multiply-adds. Column panels are the outer (thread-split)
loop, so one panel of B (K x 32 floats) stays in L2 while every row block passes over it.
Used when N is a multiple of 16 and M of the row block; otherwise OpenBLAS.
"""

from __future__ import annotations

import numpy as np

from egraph_ir.expr import Call, Constant
from egraph_ir.types import TensorType

from .loop_ir import (
    INDEX,
    Assign,
    Bin,
    Buffer,
    Const,
    Declare,
    For,
    Kernel,
    Load,
    LoopVar,
    Ref,
    Splat,
    Stmt,
    Store,
    add,
    idx,
    mul,
)

LANES = 16


def gemm_fits(call: Call) -> bool:
    """float32 product of a tensor with a constant 2-D weight, N % 16 == 0."""
    if not isinstance(call.args[1], Constant):
        return False
    x_t, w_t = call.args[0].checked_type, call.args[1].checked_type
    if not (isinstance(x_t, TensorType) and isinstance(w_t, TensorType)):
        return False
    if x_t.dtype != "float32" or w_t.dtype != "float32" or w_t.ndim != 2 or x_t.ndim < 2:
        return False
    n = w_t.shape[0] if call.op.name == "dense" else w_t.shape[1]  # type: ignore[union-attr]
    m = int(np.prod(x_t.shape[:-1], dtype=np.int64))
    return n % LANES == 0 and _row_block(m) is not None


def _row_block(m: int) -> int | None:
    return next((b for b in (6, 4, 2, 1) if m % b == 0), None)


def packed_weights(call: Call) -> np.ndarray:
    """B as (K, N), contiguous: dense weights are (N, K) and get transposed once."""
    w = call.args[1]
    assert isinstance(w, Constant)
    data = w.data.T if call.op.name == "dense" else w.data  # type: ignore[union-attr]
    return np.ascontiguousarray(data, dtype=np.float32)


def gemm_kernel(call: Call, name: str) -> Kernel:
    """C[M, N] = A[M, K] @ B[K, N] with A = in0, B = in1 (packed), C = out."""
    x_t, out_t = call.args[0].checked_type, call.checked_type
    assert isinstance(x_t, TensorType) and isinstance(out_t, TensorType)
    k_extent = x_t.shape[-1]
    m = int(np.prod(x_t.shape[:-1], dtype=np.int64))
    n = out_t.shape[-1]
    mb = _row_block(m)
    assert mb is not None
    xv = 2 if (n // LANES) % 2 == 0 else 1
    vec = f"float32x{LANES}"
    panel, rows, k = LoopVar(INDEX, "panel"), LoopVar(INDEX, "rows"), LoopVar(INDEX, "k")
    col0 = mul(panel, idx(xv * LANES))
    b_row = add(mul(k, idx(n)), col0)
    b_vectors = [Load(vec, "in1", add(b_row, idx(v * LANES))) for v in range(xv)]
    body: list[Stmt] = [Declare(f"c{r}_{v}", Const(vec, 0.0)) for r in range(mb) for v in range(xv)]
    updates: list[Stmt] = []
    for r in range(mb):
        row = add(mul(rows, idx(mb)), idx(r))
        a = Splat(vec, Load("float32", "in0", add(mul(row, idx(k_extent)), k)))
        for v in range(xv):
            acc = f"c{r}_{v}"
            updates.append(Assign(acc, Bin(vec, "add", Ref(vec, acc), Bin(vec, "mul", a, b_vectors[v]))))
    body.append(For("k", k_extent, updates))
    for r in range(mb):
        row = add(mul(rows, idx(mb)), idx(r))
        for v in range(xv):
            dst = add(add(mul(row, idx(n)), col0), idx(v * LANES))
            body.append(Store("out", dst, Ref(vec, f"c{r}_{v}")))
    nest: list[Stmt] = [For("panel", n // (xv * LANES), [For("rows", m // mb, body)], outer=True)]
    buffers = [
        Buffer("in0", "float32", (m, k_extent)),
        Buffer("in1", "float32", (k_extent, n)),
        Buffer("out", "float32", (m, n)),
    ]
    return Kernel(name, buffers, nest, n // (xv * LANES), work=float(m * n * k_extent // LANES))
