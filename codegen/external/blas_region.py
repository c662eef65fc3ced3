"""The `blas` target: products through the BLAS library, their bias and activation after.

A region (dense, matmul and batch_matmul calls, and the `blas.*` composites of
rules/builtin/blas.patterns) runs op by op: each float product is one or more GEMM calls of
the project's BLAS (codegen/runtime/blas.py, one thread per call), cut into blocks over the thread
budget when it is big enough to pay for threads (ctypes releases the GIL during a call);
every other op of the region (a composite's bias or activation) runs its numpy reference
on the product's output.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from egraph_ir.infer import infer_type
from egraph_ir.inline import inline_function
from egraph_ir.registry import Op
from egraph_ir.visitor import post_order

from ..runtime import blas
from . import Runner

PARALLEL_FLOPS = 1 << 21  # below this a product runs as one GEMM on the calling thread
Step = Callable[[dict[Expr, Any]], None]


def build(fn: Function, threads: int) -> Runner:
    plain = inline_function(Function(fn.params, fn.body, fn.ret_type))
    infer_type(plain)
    lib = blas.library()
    pool = _pool(threads) if threads > 1 else None
    steps: list[Step] = []
    for n in post_order(plain.body, into_functions=False):
        if isinstance(n, Call) and isinstance(n.op, Op):
            steps.append(_op_step(n, lib, pool, threads))
        elif not isinstance(n, Var):
            steps.append(_value_step(n))
    params, body = plain.params, plain.body

    def run(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        env: dict[Expr, Any] = dict(zip(params, inputs, strict=True))
        for step in steps:
            step(env)
        result = env[body]
        values = result if isinstance(body, Tuple) else (result,)
        for out, value in zip(outputs, values, strict=True):
            out[...] = value

    return run


@cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """One pool per thread budget, shared by every blas region (not one per region)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="egc-blas")


def _value_step(n: Expr) -> Step:
    """A tuple, a tuple field or a constant."""
    if isinstance(n, Tuple):
        fields = n.fields
        return lambda env: env.__setitem__(n, tuple(env[f] for f in fields))
    if isinstance(n, TupleGetItem):
        source, index = n.tuple_value, n.index
        return lambda env: env.__setitem__(n, env[source][index])
    if isinstance(n, Constant):
        data = n.data
        return lambda env: env.__setitem__(n, data)
    raise CodegenError(f"the blas target cannot run {type(n).__name__} nodes")


def _op_step(call: Call, lib: ctypes.CDLL, pool: ThreadPoolExecutor | None, threads: int) -> Step:
    op = call.op
    assert isinstance(op, Op)
    dtype = getattr(call.checked_type, "dtype", None)
    if op.name in ("dense", "matmul", "batch_matmul") and dtype in blas.BLAS_DTYPES:
        product = blas.product_of(call)
        gemm = _gemm(lib, product, pool if product.flops >= PARALLEL_FLOPS else None, threads)
        shape = call.checked_type.shape  # type: ignore[attr-defined]
        a, b = call.args

        def product_step(env: dict[Expr, Any]) -> None:
            out = np.empty(shape, dtype)
            gemm(np.ascontiguousarray(env[a]), np.ascontiguousarray(env[b]), out)
            env[call] = out

        return product_step
    args, attrs = call.args, call.attrs
    return lambda env: env.__setitem__(call, op.evaluate([env[x] for x in args], attrs))


def _gemm(
    lib: ctypes.CDLL, p: blas.Product, pool: ThreadPoolExecutor | None, threads: int
) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """C = op(A) @ op(B) as GEMM calls over the product's blocks."""
    fn = lib.scipy_cblas_sgemm if p.dtype == "float32" else lib.scipy_cblas_dgemm
    real = ctypes.c_float if p.dtype == "float32" else ctypes.c_double
    size = np.dtype(p.dtype).itemsize
    blocks = p.blocks(threads * 4 if pool is not None else 1)
    ta = blas.TRANS if p.trans_a else blas.NO_TRANS
    tb = blas.TRANS if p.trans_b else blas.NO_TRANS
    one, zero = real(1.0), real(0.0)

    def call_block(block: blas.Block, a: int, b: int, c: int) -> None:
        fn(blas.ROW_MAJOR, ta, tb, block.m, block.n, p.k, one,
           ctypes.c_void_p(a + block.a * size), p.lda,
           ctypes.c_void_p(b + block.b * size), p.ldb, zero,
           ctypes.c_void_p(c + block.c * size), p.n)  # fmt: skip

    def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
        if pool is None or len(blocks) == 1:
            for block in blocks:
                call_block(block, pa, pb, pc)
            return
        list(pool.map(lambda blk: call_block(blk, pa, pb, pc), blocks))

    return gemm
