"""qnn_matmul / qnn_dense on constant int8 weights as an integer product: packed.py's packed
panels over words of four k, summed in int32 by VNNI's vpdpbusd.

A (M, K) holds unsigned bytes (dynamically quantised activations: DynamicQuantizeLinear
writes uint8), so each row is already K / 4 words of four consecutive k; the weights are
packed at compile time into panels of W columns whose every word holds four k of one
column. With the weights' zero point 0 (quantize_dynamic's int8 weights are symmetric),
sum((a - za) * b) = sum(a * b) - za * sum(b) per column: the column sums are constants,
the activations' zero point a run-time scalar the block multiplies in as it stores.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.expr import Call, Constant, Expr, Var
from egraph_ir.registry import Op
from egraph_ir.support import register_native_form
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order

from ....loop_ir import INDEX, LANES, Bin, Buffer, Cast, Dot4, LExpr, Load, LoopVar, Splat, idx
from ...group import Group
from ...kinds import LoopKernel, Unsupported
from ...strategy import NativeKernel
from ..conv.shape import Accumulation, integer_sums_fit, sums_by_pairs
from . import packed as gemm
from .packed import Packed, panel_epilogue, panel_kernel

WORD = 4  # k per 32-bit word


def fits(call: Call) -> bool:
    """qnn_matmul / qnn_dense of uint8 activations (K a multiple of 4, any zero point)
    and constant 2-D int8 weights with zero points 0."""
    if not (isinstance(call.op, Op) and call.op.name in ("qnn_matmul", "qnn_dense")):
        return False
    a, b, a_zero, b_zero = call.args
    a_t, zero_t = a.checked_type, a_zero.checked_type
    if not (isinstance(a_t, TensorType) and isinstance(zero_t, TensorType)):
        return False
    if not (isinstance(b, Constant) and isinstance(b_zero, Constant)):
        return False
    return (
        a_t.dtype == "uint8"
        and a_t.ndim >= 2
        and a_t.shape[-1] % WORD == 0
        and zero_t.size == 1
        and b.data.ndim == 2
        and b.data.dtype == np.int8
        and not b_zero.data.any()  # 0, per tensor or per column
    )


def worth_it(call: Call) -> bool:
    """Where the CPU multiplies bytes natively as the call sums them (integer_sums_fit)."""
    if not fits(call):
        return False
    b = call.args[1]
    assert isinstance(b, Constant) and isinstance(call.op, Op)
    by_column = b.data.T if call.op.name == "qnn_matmul" else b.data  # (N, K): k pairs
    return integer_sums_fit(call, by_column)


def pack(call: Call) -> tuple[Packed, np.ndarray]:
    """The packed product over words (its k counts words; its n the columns rounded up to
    whole vectors, the extra ones zero) and the weights' column sums."""
    a_t = call.args[0].checked_type
    weights = call.args[1]
    assert isinstance(a_t, TensorType) and isinstance(weights, Constant)
    assert isinstance(call.op, Op)
    b = weights.data if call.op.name == "qnn_matmul" else weights.data.T  # (K, N)
    k, n = b.shape
    b = np.pad(b, ((0, 0), (0, -n % LANES)))
    n = b.shape[1]
    m = int(np.prod(a_t.shape[:-1], dtype=np.int64))
    mr, xv = gemm.register_block(m, n)
    width = xv * LANES
    grouped = b.reshape(k // WORD, WORD, n // width, width).transpose(2, 0, 3, 1)
    words = np.ascontiguousarray(grouped, dtype=np.int8).view("<i4")[..., 0]
    sums = b.astype(np.int64).sum(axis=0).astype(np.int32)  # zero for the extra columns
    return Packed(m, n, k // WORD, mr, xv, words), sums


@dataclasses.dataclass(frozen=True)
class ByteProduct(Accumulation):
    """gemm's row block over words by vpdpbusd; each stored vector of columns minus the
    activations' zero point (`zero`, a run-time scalar) times their weight sums."""

    zero: str = ""  # the buffer holding the activations' zero point
    pairs: bool = False  # byte products added in int16 pairs (loop_ir.Dot4)
    vector: str = f"int32x{LANES}"
    scalar: str = "int32"

    def update(self, acc: LExpr, inputs: LExpr, weight: LExpr) -> LExpr:
        return Dot4(self.vector, acc, inputs, weight, self.pairs)

    def lanes_result(self, acc: LExpr, first: LExpr) -> LExpr:
        zero = Splat(self.vector, Cast("int32", Load("uint8", self.zero, idx(0))))
        offset = Bin(self.vector, "mul", zero, Load(self.vector, self.offsets, first))
        return Bin(self.vector, "sub", acc, offset)


register_native_form("qnn_matmul", worth_it)  # CanonicalizeQnn keeps these for this kernel
register_native_form("qnn_dense", worth_it)


def int8_packed_gemm(
    group: Group, anchor: Call, ops: list[str], p: Packed, sums: np.ndarray
) -> LoopKernel:
    """qnn_matmul / qnn_dense by byte words (int8.py) into an int32 scratch (the
    output holds the epilogue's result), the epilogue one panel at a time. The activations
    are read as words: their buffer is declared int32 here, so the group may read them
    nowhere else."""
    a, a_zero = anchor.args[0], anchor.args[2]
    assert isinstance(a, Var)
    reads = [n for n in post_order(group.fn.body) if isinstance(n, Call) and a in n.args]
    if reads != [anchor]:
        raise Unsupported("the quantised activations are read beside the int8 product")
    a_buffer = group.buffers[a]
    group.buffers[a] = Buffer(a_buffer.name, "int32", (p.m, p.k))
    zero = group.buffer_of(a_zero if isinstance(a_zero, Var) else _one_element(a_zero))
    offsets = group.buffer_of(Constant(sums))
    arithmetic = ByteProduct(offsets=offsets, zero=zero, pairs=sums_by_pairs(anchor))
    panel = LoopVar(INDEX, "panel")
    packed = group.buffer_of(Constant(p.panels))
    stmts = gemm.panel_block(p, panel, a_buffer.name, packed, "acc", arithmetic)
    stmts += panel_epilogue(group, panel, p, sums="acc")
    return panel_kernel(group, ops, p, stmts, Int8Product.NAME, int32_sums=True)


def _one_element(e: Expr) -> Constant:
    """A scalar constant as a one-element buffer (scalar constants are inlined, not
    buffers)."""
    assert isinstance(e, Constant)
    return Constant(np.asarray(e.data).reshape(1))


@dataclass(frozen=True)
class Int8Product(NativeKernel):
    """qnn_matmul / qnn_dense on constant int8 weights: byte words by vpdpbusd, with the
    weights' column sums for the zero-point offset."""

    NAME: ClassVar[str] = "gemm/int8"
    ANY_RESULT_DTYPE: ClassVar[bool] = True
    packed: Packed
    sums: np.ndarray = dataclasses.field(compare=False)

    def build(self, group: Group, anchor: Call, ops: list[str]) -> LoopKernel:
        return int8_packed_gemm(group, anchor, ops, self.packed, self.sums)
