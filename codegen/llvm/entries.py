"""Entry functions: `step_<i>(slots, state)` runs one kernel's calls (loop launches, in
parallel through the pool of native.py, and GEMM blocks), `segment_<j>(slots, state)` a run
of steps, so a whole model is one native call per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from egraph_ir.dims import Dim

from .native import I8P, I32, I64, STATE, TASK, Pool, c64, counted_loop, serial_loop
from .sizes import sizes_global

if TYPE_CHECKING:
    from ..runtime.blas import SizedProduct

PARALLEL_WORK = 1 << 15  # element-ops below which one thread beats a hand-off (~2 us)
PARALLEL_FLOPS = 1 << 19  # the GEMM a hand-off is worth
CHUNKS_PER_THREAD = 4  # finer chunks keep both cores busy when one is slowed down


@dataclass
class LaunchCall:
    """kernel(buffers..., start, end) over [0, extent), in `chunks` pieces (1: inline).
    A symbolic kernel's launch (`chunks` None) computes its extent and work from the
    sizes when it runs, and splits over `threads` where the work is worth it."""

    kernel: str
    slots: list[int]
    extent: int | Dim
    chunks: int | None
    work: float | Dim = 0
    threads: int = 1


@dataclass
class GemmCall:
    """One product: blocks of (a, b, c byte offsets, m, n) of single-threaded GEMMs."""

    dtype: str
    slots: tuple[int, int, int]
    trans_a: bool
    trans_b: bool
    k: int
    lda: int
    ldb: int
    ldc: int
    blocks: list[tuple[int, int, int, int, int]]
    parallel: bool

    @property
    def row_vector(self) -> bool:
        """A is one row (a batch-1 classifier): GEMV, which OpenBLAS's GEMM is not for
        one row (1x1280 by 1280x1000: 415 us as one GEMM call, 89 us as GEMV)."""
        return not self.trans_a and all(block[3] == 1 for block in self.blocks)


@dataclass
class SizedGemmCall:
    """A product whose extents name sizes (blas.SizedProduct): its blocks are cut when it
    runs, from the sizes, over `threads` where the work is worth it."""

    product: SizedProduct
    slots: tuple[int, int, int]
    threads: int


@dataclass
class RepeatCall:
    """`calls` once per item of a leading size (`count`, from the sizes), the slots in
    `strides` moved on by their bytes per item (codegen/lower/per_item.py)."""

    count: Dim
    calls: list[LaunchCall | GemmCall]
    strides: dict[int, int]


GEMM_SYMBOLS = {"float32": "egc_sgemm", "float64": "egc_dgemm"}
GEMV_SYMBOLS = {"float32": "egc_sgemv", "float64": "egc_dgemv"}
SLOTS = I64.as_pointer()
ENTRY = ir.FunctionType(ir.VoidType(), [SLOTS, STATE])  # fn(slots, state)


class EntryEmitter:
    """Step and segment functions: `step_<i>(slots, state)` runs one kernel's calls,
    `segment_<j>(slots, state)` a run of steps; slots hold every buffer's address."""

    def __init__(self, module: ir.Module, pool: Pool, size_names: tuple[str, ...] = ()) -> None:
        self.module, self.pool, self.size_names = module, pool, size_names
        self.chunk_fns: dict[str, ir.Function] = {}
        self.gemms = 0
        self.blas: dict[str, ir.Function] = {}
        self.moved: dict[int, ir.Value] = {}  # slot -> bytes added to its address (an item's)

    def step(
        self, index: int, calls: list[LaunchCall | GemmCall | SizedGemmCall | RepeatCall]
    ) -> str:
        name = f"egc_step_{index}"
        fn = ir.Function(self.module, ENTRY, name)
        fn.attributes.add("noinline")  # a segment of 10,000 inlined steps is slow to optimise
        slots, state = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        for call in calls:
            if isinstance(call, LaunchCall):
                self._launch(b, fn, slots, state, call)
            elif isinstance(call, SizedGemmCall):
                self._sized_gemm(b, fn, slots, state, call)
            elif isinstance(call, RepeatCall):
                self._repeat(b, fn, slots, state, call)
            else:
                self._gemm(b, fn, slots, state, call)
        b.ret_void()
        return name

    def segment(self, index: int, steps: list[str]) -> str:
        name = f"egc_segment_{index}"
        fn = ir.Function(self.module, ENTRY, name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        for step in steps:
            b.call(self.module.get_global(step), list(fn.args))
        b.ret_void()
        return name

    # ------------------------------------------------------------ launches
    def _address(self, b: ir.IRBuilder, slots: ir.Value, slot: int) -> ir.Value:
        address = b.load(b.gep(slots, [c64(slot)], inbounds=True))
        return b.add(address, self.moved[slot]) if slot in self.moved else address

    def _repeat(
        self, b: ir.IRBuilder, fn: ir.Function, slots: ir.Value, state: ir.Value,
        call: RepeatCall,
    ) -> None:  # fmt: skip
        """The calls once per item, each item's buffers `strides` bytes on; the stack
        the calls take (their argument blocks) is given back after each item."""
        with counted_loop(b, fn, self._size(b, call.count), "items") as item:
            stack = b.call(self._intrinsic("llvm.stacksave", I8P, []), [])
            self.moved = {slot: b.mul(item, c64(n)) for slot, n in call.strides.items()}
            for inner in call.calls:
                if isinstance(inner, LaunchCall):
                    self._launch(b, fn, slots, state, inner)
                else:
                    self._gemm(b, fn, slots, state, inner)
            self.moved = {}
            b.call(self._intrinsic("llvm.stackrestore", ir.VoidType(), [I8P]), [stack])

    def _intrinsic(self, name: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
        try:
            return self.module.get_global(name)
        except KeyError:
            return ir.Function(self.module, ir.FunctionType(result, args), name)

    def _launch(
        self, b: ir.IRBuilder, fn: ir.Function, slots: ir.Value, state: ir.Value, call: LaunchCall
    ) -> None:
        kernel = self.module.get_global(call.kernel)
        types = [a.type for a in kernel.args[:-2]]
        addresses = [self._address(b, slots, s) for s in call.slots]
        if call.chunks is None:
            self._launch_sized(b, state, call, kernel, types, addresses)
            return
        assert isinstance(call.extent, int)  # a static launch
        if call.chunks <= 1:
            pointers = [b.inttoptr(a, t) for a, t in zip(addresses, types, strict=True)]
            b.call(kernel, [*pointers, c64(0), c64(call.extent)])
            return
        data = b.alloca(ir.ArrayType(I64, len(addresses) + 2))
        for k, value in enumerate([*addresses, c64(call.extent), c64(call.chunks)]):
            b.store(value, b.gep(data, [c64(0), c64(k)], inbounds=True))
        task = self._chunk_fn(call.kernel, kernel, types)
        b.call(self.pool.parallel, [state, task, b.bitcast(data, I8P), c64(call.chunks)])

    def _launch_sized(
        self,
        b: ir.IRBuilder,
        state: ir.Value,
        call: LaunchCall,
        kernel: ir.Function,
        types: list[ir.Type],
        addresses: list[ir.Value],
    ) -> None:
        """A symbolic kernel's launch: extent and work from the sizes, split over the
        threads where there is more than one row and the work is worth a hand-off."""
        extent = self._size(b, call.extent)
        work = self._size(b, call.work)
        split = b.and_(
            b.icmp_signed(">", extent, c64(1)), b.icmp_signed(">=", work, c64(PARALLEL_WORK))
        )
        most = c64(call.threads * CHUNKS_PER_THREAD)
        fewer = b.select(b.icmp_signed("<", extent, most), extent, most)
        chunks = b.select(split, fewer, c64(1)) if call.threads > 1 else c64(1)
        data = b.alloca(ir.ArrayType(I64, len(addresses) + 2))
        for k, value in enumerate([*addresses, extent, chunks]):
            b.store(value, b.gep(data, [c64(0), c64(k)], inbounds=True))
        pointers = [b.inttoptr(a, t) for a, t in zip(addresses, types, strict=True)]
        if call.threads == 1:
            b.call(kernel, [*pointers, c64(0), extent])
            return
        with b.if_else(b.icmp_signed(">", chunks, c64(1))) as (parallel, inline):
            with parallel:  # split over the pool
                task = self._chunk_fn(call.kernel, kernel, types)
                b.call(self.pool.parallel, [state, task, b.bitcast(data, I8P), chunks])
            with inline:  # one piece: called here, as a static launch of one chunk is
                b.call(kernel, [*pointers, c64(0), extent])

    def _size(self, b: ir.IRBuilder, d: float | Dim) -> ir.Value:
        """The value of a (symbolic) size, from the `egc_sizes` global."""
        if not isinstance(d, Dim):
            return c64(int(d))
        table = sizes_global(self.module)

        def size(name: str) -> ir.Value:
            slot = c64(self.size_names.index(name))
            return b.load(b.gep(table, [c64(0), slot], inbounds=True))

        return d.fold(c64, size, b.add, b.mul, lambda a, k: b.sdiv(a, c64(k)))

    def _chunk_fn(self, name: str, kernel: ir.Function, types: list[ir.Type]) -> ir.Function:
        """name.chunk(data, c): the kernel over chunk c of data's [0, extent)."""
        if name in self.chunk_fns:
            return self.chunk_fns[name]
        fn = ir.Function(self.module, TASK, f"{name}.chunk")
        data, chunk = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        fields = b.bitcast(data, I64.as_pointer())
        values = [b.load(b.gep(fields, [c64(k)], inbounds=True)) for k in range(len(types) + 2)]
        extent, chunks = values[-2], values[-1]
        start = b.udiv(b.mul(extent, chunk), chunks)
        end = b.udiv(b.mul(extent, b.add(chunk, c64(1))), chunks)
        pointers = [b.inttoptr(v, t) for v, t in zip(values[:-2], types, strict=True)]
        b.call(kernel, [*pointers, start, end])
        b.ret_void()
        self.chunk_fns[name] = fn
        return fn

    # ------------------------------------------------------------ products
    def _blas(self, dtype: str) -> ir.Function:
        if dtype not in self.blas:
            scalar = ir.FloatType() if dtype == "float32" else ir.DoubleType()
            args = [I32] * 6 + [scalar, I8P, I32, I8P, I32, scalar, I8P, I32]
            fnty = ir.FunctionType(ir.VoidType(), args)
            self.blas[dtype] = ir.Function(self.module, fnty, GEMM_SYMBOLS[dtype])
        return self.blas[dtype]

    def _blas_gemv(self, dtype: str) -> ir.Function:
        name = GEMV_SYMBOLS[dtype]
        if name not in self.blas:
            scalar = ir.FloatType() if dtype == "float32" else ir.DoubleType()
            args = [I32] * 4 + [scalar, I8P, I32, I8P, I32, scalar, I8P, I32]
            self.blas[name] = ir.Function(self.module, ir.FunctionType(ir.VoidType(), args), name)
        return self.blas[name]

    def _gemm(
        self, b: ir.IRBuilder, fn: ir.Function, slots: ir.Value, state: ir.Value, call: GemmCall
    ) -> None:
        self.gemms += 1
        rows = ir.ArrayType(ir.ArrayType(I64, 5), len(call.blocks))
        table = ir.GlobalVariable(self.module, rows, f"egc_gemm_{self.gemms}.blocks")
        table.global_constant = True
        table.linkage = "internal"
        table.initializer = ir.Constant(
            rows, [ir.Constant(ir.ArrayType(I64, 5), list(r)) for r in call.blocks]
        )
        task = self._gemm_chunk_fn(call, table)
        data = b.alloca(ir.ArrayType(I64, 3))
        for k, slot in enumerate(call.slots):
            b.store(self._address(b, slots, slot), b.gep(data, [c64(0), c64(k)], inbounds=True))
        raw = b.bitcast(data, I8P)
        if call.parallel:
            b.call(self.pool.parallel, [state, task, raw, c64(len(call.blocks))])
            return
        serial_loop(b, fn, task, raw, len(call.blocks))

    def _gemm_chunk_fn(self, call: GemmCall, table: ir.GlobalVariable) -> ir.Function:
        fn = ir.Function(self.module, TASK, f"egc_gemm_{self.gemms}.chunk")
        data, chunk = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        fields = b.bitcast(data, I64.as_pointer())
        base = [b.load(b.gep(fields, [c64(k)], inbounds=True)) for k in range(3)]
        row = [b.load(b.gep(table, [c64(0), chunk, c64(k)], inbounds=True)) for k in range(5)]
        a, bb, c = (b.inttoptr(b.add(base[k], row[k]), I8P) for k in range(3))
        m, n = (b.trunc(v, I32) for v in row[3:])
        scalar = ir.FloatType() if call.dtype == "float32" else ir.DoubleType()

        def i32(v: int) -> ir.Constant:
            return ir.Constant(I32, v)

        one, zero = ir.Constant(scalar, 1.0), ir.Constant(scalar, 0.0)
        if call.row_vector:  # c = op(B) applied to the row a: B (n, K) as is, or (K, n) transposed
            shape = [n, i32(call.k)] if call.trans_b else [i32(call.k), n]
            op_b = i32(111 if call.trans_b else 112)
            args = [i32(101), op_b, *shape, one, bb, i32(call.ldb), a, i32(1), zero, c, i32(1)]
            b.call(self._blas_gemv(call.dtype), args)
            b.ret_void()
            return fn
        args = [
            i32(101), i32(112 if call.trans_a else 111), i32(112 if call.trans_b else 111),
            m, n, i32(call.k), one, a, i32(call.lda), bb, i32(call.ldb), zero, c, i32(call.ldc),
        ]  # fmt: skip
        b.call(self._blas(call.dtype), args)
        b.ret_void()
        return fn

    # ------------------------------------------------------------ products with sizes
    def _sized_gemm(
        self, b: ir.IRBuilder, fn: ir.Function, slots: ir.Value, state: ir.Value,
        call: SizedGemmCall,
    ) -> None:  # fmt: skip
        """A product whose extents name sizes: m, n, k, the item count and strides from
        the sizes; each item cut into `per_item` row (or column) blocks when there are
        fewer items than the pool wants pieces and the work is worth a hand-off."""
        p = call.product
        m, n, k, count = (self._size(b, d) for d in (p.m, p.n, p.k, p.count))
        strides = [self._size(b, d) for d in p.strides]
        per_item = c64(1)
        if call.threads > 1:
            parts = c64(call.threads * CHUNKS_PER_THREAD)
            flops = b.mul(b.mul(b.mul(m, n), b.mul(k, count)), c64(2))
            worth = b.icmp_signed(">=", flops, c64(PARALLEL_FLOPS))
            few = b.icmp_signed("<", count, parts)
            safe = b.select(b.icmp_signed(">", count, c64(0)), count, c64(1))
            per_item = b.select(b.and_(worth, few), b.sdiv(parts, safe), c64(1))
        chunks = b.mul(count, per_item)
        fields = [*(self._address(b, slots, s) for s in call.slots), m, n, k, per_item, *strides]
        data = b.alloca(ir.ArrayType(I64, len(fields)))
        for i, value in enumerate(fields):
            b.store(value, b.gep(data, [c64(0), c64(i)], inbounds=True))
        self.gemms += 1
        task = self._sized_gemm_task(p)
        raw = b.bitcast(data, I8P)
        if call.threads == 1:
            serial_loop(b, fn, task, raw, chunks)
            return
        with b.if_else(b.icmp_signed(">", chunks, c64(1))) as (parallel, inline):
            with parallel:
                b.call(self.pool.parallel, [state, task, raw, chunks])
            with inline:
                serial_loop(b, fn, task, raw, chunks)

    def _sized_gemm_task(self, p: SizedProduct) -> ir.Function:
        """task(data, chunk): block `chunk % per_item` of item `chunk // per_item`: rows
        of A and C where m >= n, else columns of B and C; an empty block does nothing."""
        fn = ir.Function(self.module, TASK, f"egc_gemm_{self.gemms}.sized")
        data, chunk = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        fields = b.bitcast(data, I64.as_pointer())
        a0, b0, c0, m, n, k, per_item, sa, sb, sc = (
            b.load(b.gep(fields, [c64(i)], inbounds=True)) for i in range(10)
        )
        item, piece = b.sdiv(chunk, per_item), b.srem(chunk, per_item)
        rows = b.icmp_signed(">=", m, n)
        extent = b.select(rows, m, n)
        first = b.sdiv(b.mul(extent, piece), per_item)
        last = b.sdiv(b.mul(extent, b.add(piece, c64(1))), per_item)
        size = c64(4 if p.dtype == "float32" else 8)
        step_a = b.select(rows, b.mul(first, k if not p.trans_a else c64(1)), c64(0))
        step_b = b.select(rows, c64(0), b.mul(first, k if p.trans_b else c64(1)))
        step_c = b.select(rows, b.mul(first, n), first)
        a, bb, c = (
            b.inttoptr(b.add(base, b.mul(b.add(b.mul(item, stride), step), size)), I8P)
            for base, stride, step in ((a0, sa, step_a), (b0, sb, step_b), (c0, sc, step_c))
        )
        width = b.sub(last, first)
        block_m = b.trunc(b.select(rows, width, m), I32)
        block_n = b.trunc(b.select(rows, n, width), I32)
        other = b.select(rows, n, m)
        empty = b.or_(b.icmp_signed("<=", width, c64(0)), b.icmp_signed("<=", other, c64(0)))
        with b.if_then(b.not_(empty)):
            self._sized_blas_call(b, p, a, bb, c, block_m, block_n, m, n, k)
        b.ret_void()
        return fn

    def _sized_blas_call(
        self, b: ir.IRBuilder, p: SizedProduct, a: ir.Value, bb: ir.Value, c: ir.Value,
        block_m: ir.Value, block_n: ir.Value, m: ir.Value, n: ir.Value, k: ir.Value,
    ) -> None:  # fmt: skip
        """One BLAS GEMM of a block, or GEMV where the block is one row of an untransposed
        A (OpenBLAS's GEMM is slow for one row, GemmCall.row_vector); leading dimensions at
        least 1, as BLAS requires."""

        def lead(v: ir.Value) -> ir.Value:
            return b.trunc(b.select(b.icmp_signed(">", v, c64(1)), v, c64(1)), I32)

        scalar = ir.FloatType() if p.dtype == "float32" else ir.DoubleType()
        one, zero = ir.Constant(scalar, 1.0), ir.Constant(scalar, 0.0)
        lda, ldb = lead(m if p.trans_a else k), lead(k if p.trans_b else n)

        def i32(v: int) -> ir.Constant:
            return ir.Constant(I32, v)

        args = [
            i32(101), i32(112 if p.trans_a else 111), i32(112 if p.trans_b else 111),
            block_m, block_n, b.trunc(k, I32), one, a, lda, bb, ldb, zero, c, lead(n),
        ]  # fmt: skip
        if p.trans_a:
            b.call(self._blas(p.dtype), args)
            return
        with b.if_else(b.icmp_signed("==", block_m, i32(1))) as (row, rows):
            with row:  # c = op(B) applied to the row a: B (n, K) as is, or (K, n) transposed
                shape = [block_n, b.trunc(k, I32)] if p.trans_b else [b.trunc(k, I32), block_n]
                op_b = i32(111 if p.trans_b else 112)
                gemv = [i32(101), op_b, *shape, one, bb, ldb, a, i32(1), zero, c, i32(1)]
                b.call(self._blas_gemv(p.dtype), gemv)
            with rows:
                b.call(self._blas(p.dtype), args)
