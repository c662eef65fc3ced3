"""Products with a constant right-hand side as a JIT micro-kernel on weights packed at
compile time, with the fused epilogue applied panel by panel.

The weights (dense's W, or matmul's constant B) are repacked once into panels of PW = 16*XV
columns, each K x PW contiguous; a step keeps an MR x XV block of 16-lane accumulators in
registers and, for every k, loads XV vectors of the panel and broadcasts MR elements of A:
MR*XV fused multiply-adds per MR+XV loads. OpenBLAS reaches ~90 GFLOP/s on one core for
the MLP's 64x784x512 product (its packing of A and B is redone on every call); this kernel
needs no run-time packing at all. Threads split the panels; each panel's epilogue runs
right after it, while its columns are still in cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from egraph_ir.dims import Dim
from egraph_ir.expr import Call, Constant
from egraph_ir.registry import Op
from egraph_ir.types import TensorType

from ....llvm.cpu import accumulator_budget
from ....loop_ir import (
    INDEX,
    LANES,
    Assign,
    Bin,
    Buffer,
    Declare,
    For,
    Kernel,
    LExpr,
    Load,
    LoopVar,
    Ref,
    Select,
    Splat,
    Stmt,
    Store,
    heavy,
    idx,
)
from ...compute.definitions import Index
from ...group import Group
from ...kinds import BufferRef, JitGemmKernel, LoopKernel
from ...strategy import NativeKernel
from ..conv.shape import FLOAT_SUMS, Accumulation, zero


@dataclass(frozen=True)
class Packed:
    """C (M, N) = A (M, K) @ B (K, N), B constant and packed; M may be a symbolic size
    (the rows of batch * seq tokens), read when the kernel runs."""

    m: int | Dim
    n: int
    k: int
    mr: int  # rows per register block (the last m % mr rows are one smaller block)
    xv: int  # vectors per panel
    panels: np.ndarray  # (N / PW, K, PW)
    # dense_mlas / matmul_mlas: K in slices of this many, each summed from zero and added
    # to the stored sums (MLAS's order); 0: one chain over all of K
    stride_k: int = 0
    # matmul_mlas: `panels` is the constant left matrix (M, K), broadcast, and the vectors
    # are read in place from the run-time right one (K, N)
    direct: bool = False
    # the product's own columns where n rounds them up to whole panels (a vocabulary of
    # 50,257): the last panel's zero-padded columns go to a scratch, the rest is copied
    columns: int = 0

    @property
    def row_length(self) -> int:
        """Elements per row of the result the panels are stored into."""
        return self.columns or self.n

    @property
    def full_panels(self) -> int:
        """Panels whose every column is one of the result's."""
        return self.row_length // self.width

    @property
    def width(self) -> int:
        return self.xv * LANES

    @property
    def macs(self) -> int | Dim:
        return self.m * self.n * self.k


PADDED_COLUMNS = 64  # the fewest columns packed into a zero-padded last panel


def packed_fits(call: Call) -> bool:
    """float32 dense (or dense_mlas) / 2-D-or-more matmul whose right operand is a constant
    with a multiple of 16 columns, or 64 or more (padded to whole panels: at most a
    quarter more work); dense_mlas with any (no other kernel sums in MLAS's order)."""
    if not isinstance(call.op, Op) or call.op.name not in ("dense", "dense_mlas", "matmul"):
        return False
    a_t, b_t = call.args[0].checked_type, call.args[1].checked_type
    if not isinstance(a_t, TensorType) or not isinstance(b_t, TensorType):
        return False
    if (
        a_t.dtype != "float32"
        or b_t.ndim != 2
        or a_t.ndim < 2
        or not isinstance(call.args[1], Constant)
    ):
        return False
    n = b_t.shape[1] if call.op.name == "matmul" else b_t.shape[0]
    # one row (a decoding step's GEMV) streams its weights once: BLAS's GEMV reads them
    # unpadded, 13% faster for GPT-2's 768 x 50,257 vocabulary (8.3 against 9.4 ms)
    one_row = math.prod(a_t.shape[:-1]) == 1
    padded = n >= PADDED_COLUMNS and not one_row
    return n % LANES == 0 or padded or call.op.name == "dense_mlas"


def pack(call: Call) -> Packed:
    a_t = call.args[0].checked_type
    assert isinstance(a_t, TensorType) and isinstance(call.op, Op)
    weights = call.args[1]
    assert isinstance(weights, Constant)
    b = weights.data if call.op.name == "matmul" else weights.data.T  # (K, N)
    k, columns = b.shape
    m = math.prod(a_t.shape[:-1])
    mr, xv = register_block(m, -(-columns // LANES) * LANES)
    width = xv * LANES
    n = -(-columns // width) * width
    padded = np.zeros((k, n), "float32")
    padded[:, :columns] = b
    panels = np.ascontiguousarray(padded.reshape(k, n // width, width).transpose(1, 0, 2))
    stride_k = int(call.attrs["stride_k"]) if call.op.name == "dense_mlas" else 0
    return Packed(m, n, k, mr, xv, panels, stride_k, columns=columns if columns != n else 0)


def mlas_fits(call: Call) -> bool:
    """A matmul_mlas whose left operand is a constant and whose columns fill 16 lanes."""
    a, b = call.args
    b_t = b.checked_type
    return isinstance(a, Constant) and isinstance(b_t, TensorType) and b_t.shape[1] % LANES == 0


def mlas_product(call: Call) -> Packed:
    """The kernel of matmul_mlas a @ b: MLAS's own orientation, a's elements broadcast and
    b's rows read as vectors in place (no packing), so a convolution's filters times its
    patches (K, pixels) give NCHW rows without a transpose."""
    a, out_t = call.args[0], call.checked_type
    assert isinstance(a, Constant) and isinstance(out_t, TensorType)
    (m, k), n = a.data.shape, out_t.shape[1]
    mr, xv = register_block(m, n)
    weights = np.ascontiguousarray(a.data, "float32")
    return Packed(m, n, k, mr, xv, weights, int(call.attrs["stride_k"]), direct=True)


def register_block(m: int | Dim, n: int) -> tuple[int, int]:
    """(MR, XV): rows and 16-lane vectors of accumulators a step keeps in registers, as
    many as the host holds without spilling (codegen/llvm/cpu.py's budget): 8 x 2 of the 32
    AVX-512 registers; 6 x 1 with AVX2, where a 16-lane vector takes two of the 16
    registers (8 x 2 there spilled an accumulator to the stack on every FMA: 33 against
    83 GFLOP/s on one core for 256x512x128, measured). The last m % MR rows: a tail."""
    budget = accumulator_budget()
    xv = 2 if n % (2 * LANES) == 0 and budget >= 16 else 1
    most = min(8, budget // xv)
    return (most if isinstance(m, Dim) else max(1, min(most, m))), xv


def panel_block(
    p: Packed,
    panel: LoopVar,
    a: str,
    packed: str,
    dest: str,
    arithmetic: Accumulation = FLOAT_SUMS,
    tile: Callable[[LExpr, int], list[Stmt]] | None = None,
    tag: str = "",
) -> list[Stmt]:
    """dest[:, panel*PW : (panel+1)*PW] = a @ the panel: MR rows at a time, then the last
    m % MR rows as one smaller block (a row count that MR does not divide, 197 tokens say,
    keeps the full register block for all but its last rows). `arithmetic`: float32
    FMAs, or int8.py's byte words. With `tile`, dest is an (MR, PW) tile that each block
    of rows is stored into, followed by `tile(row0, rows)`; `tag` prefixes the names of
    its locals."""
    mb = LoopVar(INDEX, f"{tag}mb")
    buffers = (a, packed, dest)

    def rows(count: int, row0: LExpr, tag: str) -> list[Stmt]:
        return _row_block(p, count, row0, panel, buffers, tag, arithmetic, tile)

    main = rows(p.mr, mb * p.mr, tag)
    if isinstance(p.m, Dim):  # rows known at run time: the tail's rows one at a time
        tail = LoopVar(INDEX, f"{tag}tr")
        last = rows(1, idx(p.m // p.mr * p.mr) + tail, tag + "t")
        return [For(mb.name, p.m // p.mr, main), For(tail.name, p.m % p.mr, last)]
    stmts: list[Stmt] = [For(mb.name, p.m // p.mr, main)] if p.m >= p.mr else []
    rest = p.m % p.mr
    if rest:
        stmts += rows(rest, idx(p.m - rest), tag + "t")
    return stmts


def _row_block(
    p: Packed,
    rows: int,
    row0: LExpr,
    panel: LoopVar,
    buffers: tuple[str, str, str],
    tag: str,
    arithmetic: Accumulation,
    tile: Callable[[LExpr, int], list[Stmt]] | None,
) -> list[Stmt]:
    """`rows` rows from row0 of one panel: rows x XV accumulators over k, then stored;
    `buffers`: a, the packed panels, dest. With p.stride_k, a slice of K at a time, each
    slice's sums added to those stored before."""
    a, packed, dest = buffers
    vec = arithmetic.vector
    column = panel * p.width
    acc = [[f"{tag}acc{r}_{v}" for v in range(p.xv)] for r in range(rows)]
    body: list[Stmt] = [Declare(name, zero(vec)) for names in acc for name in names]
    step = p.stride_k or p.k
    for k0 in range(0, p.k, step):
        kk = LoopVar(INDEX, f"{tag}kk{k0}" if p.stride_k else f"{tag}kk")
        at_k = (kk + k0) * p.n + column if p.direct else (panel * p.k + (kk + k0)) * p.width
        loads = [Load(vec, packed, at_k + (v * LANES)) for v in range(p.xv)]
        updates: list[Stmt] = []
        for r in range(rows):
            splat = Splat(vec, Load(arithmetic.scalar, a, (row0 + r) * p.k + (kk + k0)))
            for v in range(p.xv):
                update = arithmetic.update(Ref(vec, acc[r][v]), splat, loads[v])
                updates.append(Assign(acc[r][v], update))
        if k0:
            body += [Assign(name, zero(vec)) for names in acc for name in names]
        body.append(For(kk.name, min(step, p.k - k0), updates, unroll=False))
        for r in range(rows):
            base = idx(r * p.width) if tile else (row0 + r) * p.row_length + column
            for v in range(p.xv):
                at = base + (v * LANES)
                value = arithmetic.lanes_result(Ref(vec, acc[r][v]), column + (v * LANES))
                if k0:  # MLAS adds the slice's sums to the stored ones
                    value = Bin(vec, "add", value, Load(vec, dest, at))
                body.append(Store(dest, at, value))
    return body + (tile(row0, rows) if tile else [])


def packed_gemm(group: Group, anchor: Call, ops: list[str], p: Packed, name: str) -> LoopKernel:
    """The micro-kernel and the epilogue, one column panel at a time: the run-time rows
    broadcast against the packed constant panels, or (p.direct, matmul_mlas) the constant's
    elements broadcast against the run-time rows."""
    panel = LoopVar(INDEX, "panel")
    constant = group.buffer_of(Constant(p.panels))
    if p.direct:
        broadcast, vectors = constant, group.buffers[anchor.args[1]].name
    else:
        broadcast, vectors = group.buffers[anchor.args[0]].name, constant
    stmts = panel_block(p, panel, broadcast, vectors, "out")
    if anchor is not group.fn.body:
        stmts += panel_epilogue(group, panel, p)
    if p.columns:  # the last panel runs the tail's statements instead
        tail = _tail_panel(group, anchor, p, panel, broadcast, vectors)
        stmts = [_when(Bin("bool", "lt", panel, idx(p.full_panels)), stmts, "full"), *tail]
    return panel_kernel(group, ops, p, stmts, name)


def _when(condition: LExpr, body: list[Stmt], name: str) -> For:
    """`body` where `condition` holds: a loop of one iteration, or none."""
    return For(name, 1, body, stop=Select(INDEX, condition, idx(1), idx(0)))


def _tail_panel(
    group: Group, anchor: Call, p: Packed, panel: LoopVar, broadcast: str, vectors: str
) -> list[Stmt]:
    """The last panel, whose zero-padded columns lie past the result's rows: each block of
    rows is stored into the (MR, PW) scratch "tail" (one panel alone writes it) and its
    real columns copied out as masked vectors; then the epilogue runs on those columns."""
    first = p.full_panels * p.width
    extra = p.row_length - first

    def copy(row0: LExpr, rows: int) -> list[Stmt]:
        r, c = LoopVar(INDEX, "zr"), LoopVar(INDEX, "zc")
        value = Load("float32", "tail", r * p.width + c)
        store = Store("out", (row0 + r) * p.row_length + (c + first), value)
        return [For(r.name, rows, [For(c.name, extra, [store], vectorize=True, masked=True)])]

    body = panel_block(p, panel, broadcast, vectors, "tail", tile=copy, tag="z")
    if anchor is not group.fn.body:
        body += panel_epilogue(group, panel, p, columns=extra)
    last = Bin("bool", "eq", panel, idx(p.full_panels))
    return [_when(last, body, "last")]


def panel_kernel(
    group: Group, ops: list[str], p: Packed, stmts: list[Stmt], name: str, int32_sums: bool = False
) -> JitGemmKernel:
    """The panel loop the threads share around `stmts` (kernel `name`); with `int32_sums`
    an (M, N) int32 scratch "acc" the panels sum into before their epilogue, with padded
    columns the (MR, PW) float32 "tail" of the last panel (_tail_panel)."""
    assert not (int32_sums and p.columns), "an int8 product's panels are whole"
    scratch = None
    if int32_sums:
        scratch = Buffer("acc", "int32", (p.m, p.n))
    elif p.columns:
        scratch = Buffer("tail", "float32", (p.mr, p.width))
    scratches = ((scratch.shape, scratch.dtype),) if scratch else ()
    buffers = group.kernel_buffers([scratch] if scratch else [])
    panels = p.n // p.width
    work = p.macs // LANES + group.out_type.size
    nest: list[Stmt] = [For("panel", panels, stmts, outer=True)]
    kernel = Kernel(group.name, buffers, nest, panels, work, unroll=False)
    special = {scratch.name: BufferRef("scratch", 0)} if scratch else {}
    constants, variant = dict(group.constants), name.removeprefix("gemm/")
    return JitGemmKernel(group.name, ops, kernel, constants, special, scratches, variant)


def panel_epilogue(
    group: Group, panel: LExpr, p: Packed, sums: str | None = None, columns: int = 0
) -> list[Stmt]:
    """The epilogue over the columns of one panel, every row. With `sums` (an int8
    product's int32 scratch, (M, p.n)) the anchor is read from there; where p.n is the
    output's width rounded up to whole vectors, the last panel's extra columns redo the
    output's last one (the same value stored again: a loop needs no bounds test).
    `columns`: the panel's first so many only, as masked vectors (a float tail panel's,
    whose epilogue works in place and must not run twice on a column)."""
    shape = group.out_type.shape
    n = shape[-1]
    m, j = LoopVar(INDEX, "em"), LoopVar(INDEX, "ej")
    column: LExpr = panel * p.width + j
    if n != p.n:
        column = Bin(INDEX, "min", column, idx(n - 1))
    lead = Index(shape[:-1], flat=m).multi() if len(shape) > 2 else [m]
    index = Index(shape, multi=[*lead, column], flat=m * n + column)
    if sums is None:
        value = group.reader(group.fn.body)(index)
    else:
        value = group.result_at(index, Load("int32", sums, m * p.n + column))
    store = Store("out", index.flat(), value)
    row = For("ej", columns, [store], vectorize=True, masked=True) if columns else None
    row = row or For("ej", p.width, [store])
    return [For("em", p.m, [row], outline=heavy([store]))]


@dataclass(frozen=True)
class PackedProduct(NativeKernel):
    """A float32 product on constant weights packed into column panels (JIT micro-kernel)."""

    NAME: ClassVar[str] = "gemm/packed"
    packed: Packed

    def build(self, group: Group, anchor: Call, ops: list[str]) -> LoopKernel:
        return packed_gemm(group, anchor, ops, self.packed, self.NAME)


@dataclass(frozen=True)
class MlasProduct(PackedProduct):
    """matmul_mlas in MLAS's order of sums (its `packed` is direct: nothing packed)."""

    NAME: ClassVar[str] = "gemm/mlas"
