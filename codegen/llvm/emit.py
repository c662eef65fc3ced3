"""Loop IR to LLVM IR with llvmlite.ir.

Each kernel becomes `void name(T* noalias buf0, ..., i64 start, i64 end)`. Loops are
canonical (phi, compare, branch) so LLVM's vectoriser recognises them; locals are allocas in
the entry block (mem2reg turns them into registers). float16 tensors are computed in
float32 (as numpy does) and rounded when stored; bool is i1 in registers and a byte in memory.
Float arithmetic carries `contract` (multiply-adds fuse) and, where it updates an
accumulator (a Ref operand: reductions, micro-kernel sums), `reassoc` too, so reductions
vectorise; elsewhere each operation rounds as written: LLVM would otherwise turn
(x - 30) * 0.1 into one fused multiply-add of x * 0.1 - 3.0, a different float, and a
quantised model's dequantized outputs stop equalling ONNX Runtime's. NaN and infinity keep
their IEEE meaning (no `nnan`/`ninf`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from ..loop_ir import (
    THREAD_SLOT,
    Assign,
    Bin,
    Cast,
    Const,
    Declare,
    Dot4,
    For,
    Kernel,
    LExpr,
    Load,
    Lookup,
    LoopVar,
    Ref,
    Select,
    Shuffle,
    Size,
    Splat,
    Stmt,
    Store,
    Un,
    operands,
    rounded_product,
)
from .integers import int_binary
from .loop_hints import SELF, loop_id
from .mathlib import MathLib, lane_mask
from .outline import free_names
from .sharing import StructuralKeys, single_assignment
from .sizes import sizes_global

FLAGS = ("reassoc", "contract")  # on accumulator updates
ELEMENTWISE_FLAGS = ("contract",)
VECTOR_ATTRS = 'attributes #0 = { "prefer-vector-width"="512" nounwind }'
VECTOR_LANES = 16  # float32 lanes of the 512-bit vectors asked for above


def storage_type(dtype: str) -> ir.Type:
    if dtype == "float16":
        return ir.HalfType()
    if dtype == "float32":
        return ir.FloatType()
    if dtype == "float64":
        return ir.DoubleType()
    if dtype == "bool":
        return ir.IntType(8)
    return ir.IntType(np.dtype(dtype).itemsize * 8)


def vector_of(dtype: str) -> tuple[str, int] | None:
    """("float32", 16) for "float32x16": explicit vectors (micro-kernels use them)."""
    base, sep, lanes = dtype.partition("x")
    return (base, int(lanes)) if sep and lanes.isdigit() else None


def value_type(dtype: str) -> ir.Type:
    vec = vector_of(dtype)
    if vec is not None:
        return ir.VectorType(value_type(vec[0]), vec[1])
    if dtype in ("float16", "float32"):
        return ir.FloatType()
    if dtype == "bool":
        return ir.IntType(1)
    return storage_type(dtype)


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _unsigned(dtype: str) -> bool:
    return dtype.startswith("uint")


def emit_module(
    kernels: list[Kernel],
    extend: Callable[[ir.Module], None] | None = None,
    declare: Sequence[Kernel] = (),
) -> str:
    """One LLVM module holding `kernels`, declarations of `declare` (kernels compiled in
    another module), and whatever `extend` adds (the native runtime's pool and entry
    functions); returns its text (with vector-width attrs)."""
    module = ir.Module(name="egc")
    math = MathLib(module)
    for k in kernels:
        _KernelEmitter(module, math, k).emit()
    for k in declare:
        ir.Function(module, kernel_type(k), name=k.name)
    if extend is not None:
        extend(module)
    text = math.tables.finish(str(module))
    lines = []
    for line in text.splitlines():
        if line.startswith("define void @"):  # kernels and their outlined loops
            line = line.rstrip()
            line = line[:-1].rstrip() + " #0 {" if line.endswith("{") else line + " #0"
        elif line.startswith("!") and SELF in line:  # a loop ID refers to itself
            name = line.split(" = ", 1)[0]
            line = re.sub(rf'!"{SELF}\.[0-9]+"', name, line).replace(" = !{", " = distinct !{", 1)
        lines.append(line)
    return "\n".join(lines) + "\n" + VECTOR_ATTRS + "\n"


def kernel_type(kernel: Kernel) -> ir.FunctionType:
    """void (T* buffers..., i64 start, i64 end)."""
    i64 = ir.IntType(64)
    pointers = [storage_type(b.dtype).as_pointer() for b in kernel.buffers]
    return ir.FunctionType(ir.VoidType(), [*pointers, i64, i64])


class _KernelEmitter:
    def __init__(
        self, module: ir.Module, math: MathLib, kernel: Kernel, extra: Sequence[ir.Value] = ()
    ) -> None:
        """`extra`: an outlined loop's free loop variables and locals (the caller's values,
        passed after start and end; outline.free_names names them in this order)."""
        self.kernel, self.math = kernel, math
        kind = kernel_type(kernel)
        fnty = ir.FunctionType(kind.return_type, [*kind.args, *(v.type for v in extra)])
        self.fn = ir.Function(module, fnty, name=kernel.name)
        self.fn.attributes.add("noinline")  # shared by many steps; inlining only costs time
        for a, buf in zip(self.fn.args, kernel.buffers, strict=False):
            a.name = buf.name
            a.add_attribute("noalias")
        self.start, self.end = self.fn.args[len(kernel.buffers) : len(kernel.buffers) + 2]
        self.start.name, self.end.name = "start", "end"
        self.outlined = 0
        self.pointers = {b.name: a for b, a in zip(kernel.buffers, self.fn.args, strict=False)}
        self.dtypes = {b.name: b.dtype for b in kernel.buffers}
        entry = self.fn.append_basic_block("entry")
        self.entry_builder = ir.IRBuilder(entry)
        body = self.fn.append_basic_block("body")
        self.b = ir.IRBuilder(body)
        self.loop_vars: dict[str, ir.Value] = {THREAD_SLOT.name: self.start}
        self.locals: dict[str, tuple[ir.Value, str]] = {}
        self.scopes: list[dict[int, ir.Value]] = [{}]
        self.pure: dict[int, bool] = {}
        self.shared = StructuralKeys()  # equal index arithmetic: one value per scope
        self.values: dict[str, ir.Value] = {}  # locals set once (sharing.single_assignment)
        self.single = single_assignment(kernel.body)
        self.sizes: dict[str, ir.Value] = {}  # each size variable read once, on entry
        self.scalar_values: dict[tuple[str, int], ir.Value] = {}  # and each scalar
        self.reads_bools = "bool" in self.dtypes.values()
        if extra:
            loop = kernel.body[0]
            assert isinstance(loop, For)
            free = free_names(loop)
            args = iter(self.fn.args[len(kernel.buffers) + 2 :])
            self.loop_vars.update((name, next(args)) for name in free.loop_vars)
            self.values.update((name, next(args)) for name in free.locals)

    def emit(self) -> None:
        for s in self.kernel.body:
            self.stmt(s)
        self.b.ret_void()
        self.entry_builder.branch(self.fn.basic_blocks[1])

    # ------------------------------------------------------------ statements
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, For) and s.outline:
            self.call_outlined(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Store):
            ptr = self.b.gep(self.pointers[s.buffer], [self.expr(s.index)], inbounds=True)
            if vector_of(s.value.dtype):
                vec_ptr = self.b.bitcast(ptr, value_type(s.value.dtype).as_pointer())
                self.b.store(self.expr(s.value), vec_ptr, align=4)
                return
            value = self.to_storage(self.expr(s.value), s.value.dtype, self.dtypes[s.buffer])
            self.b.store(value, ptr)
        elif isinstance(s, Declare) and s.name in self.single:
            self.values[s.name] = self.expr(s.init)
        elif isinstance(s, Declare):
            ty = value_type(s.init.dtype)
            slot = self.entry_builder.alloca(ty, name=s.name)
            self.locals[s.name] = (slot, s.init.dtype)
            self.b.store(self.expr(s.init), slot)
        elif isinstance(s, Assign):
            slot, _ = self.locals[s.name]
            self.b.store(self.expr(s.value), slot)
        else:
            raise TypeError(f"unknown statement {s!r}")

    def call_outlined(self, s: For) -> None:
        """The loop as a function of its own (codegen/llvm/outline.py), called here with the
        buffers, start and end, and the loop variables and locals it reads."""
        free = free_names(s)
        values = [self.loop_vars[v] for v in free.loop_vars]
        for name in free.locals:
            kept = self.values.get(name)
            values.append(kept if kept is not None else self.b.load(self.locals[name][0]))
        self.outlined += 1
        body: list[Stmt] = [dataclasses.replace(s, outline=False)]
        name = f"{self.kernel.name}.part{self.outlined}"
        part = dataclasses.replace(self.kernel, name=name, body=body, body_key="")
        callee = _KernelEmitter(self.fn.module, self.math, part, values)
        callee.emit()
        self.b.call(callee.fn, [*self.fn.args[: len(self.kernel.buffers) + 2], *values])

    def loop(self, s: For) -> None:
        i64 = ir.IntType(64)
        if s.extent == 1 and not s.outer and s.stop is None:  # no loop: nests of trip-count-1
            self.loop_vars[s.var] = ir.Constant(i64, 0)  # loops sent LLVM's vectoriser exponential
            self.scopes.append({})
            for inner in s.body:
                self.stmt(inner)
            self.scopes.pop()
            return
        lo = self.start if s.outer else ir.Constant(i64, 0)
        stop = self.expr(s.stop) if s.stop is not None else ir.Constant(i64, s.extent)
        hi = self.end if s.outer else stop
        pre = self.b.block
        header = self.fn.append_basic_block(f"{s.var}.head")
        body = self.fn.append_basic_block(f"{s.var}.body")
        done = self.fn.append_basic_block(f"{s.var}.done")
        self.b.branch(header)
        self.b.position_at_end(header)
        phi = self.b.phi(i64, name=s.var)
        phi.add_incoming(lo, pre)
        self.b.cbranch(self.b.icmp_signed("<", phi, hi), body, done)
        self.b.position_at_end(body)
        self.loop_vars[s.var] = phi
        self.scopes.append({})
        for inner in s.body:
            self.stmt(inner)
        self.scopes.pop()
        nxt = self.b.add(phi, ir.Constant(i64, 1), name=f"{s.var}.next")
        phi.add_incoming(nxt, self.b.block)
        latch = self.b.branch(header)
        unroll = not (s.unroll is False or (s.unroll is None and not self.kernel.unroll))
        # a short loop over bools is left to unrolling and SLP: LLVM 22's loop vectoriser
        # took 25 s on a 3x3x3x4 logical_and with a broadcast operand (fuzz seed 1008212)
        scalar = not s.vectorize and s.stop is None and s.extent < 8 and self.reads_bools
        if not unroll or s.vectorize or scalar:
            masked = s.masked or s.extent < VECTOR_LANES
            hints = loop_id(self.fn.module, unroll, s.vectorize, masked, scalar)
            latch.set_metadata("llvm.loop", hints)
        self.b.position_at_end(done)

    # ------------------------------------------------------------ expressions
    def is_pure(self, e: LExpr) -> bool:
        """No Ref inside: the value cannot change between two uses in one scope."""
        known = self.pure.get(id(e))
        if known is None:
            known = not isinstance(e, Ref) and all(self.is_pure(k) for k in operands(e))
            self.pure[id(e)] = known
        return known

    def expr(self, e: LExpr) -> ir.Value:
        key = self.shared.key(e)
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        value = self._expr(e)
        if self.is_pure(e):
            self.scopes[-1][key] = value
        return value

    def _expr(self, e: LExpr) -> ir.Value:
        b = self.b
        if isinstance(e, Const):
            return self.constant(e.value, e.dtype)
        if isinstance(e, LoopVar):
            return self.loop_vars[e.name]
        if isinstance(e, Size):
            return self.size(e.name)
        if isinstance(e, Ref):
            if e.name in self.values:
                return self.values[e.name]
            slot, _ = self.locals[e.name]
            return b.load(slot)
        if isinstance(e, Load) and e.buffer in self.kernel.scalars:
            return self.scalar(e)
        if isinstance(e, Load):
            ptr = b.gep(self.pointers[e.buffer], [self.expr(e.index)], inbounds=True)
            if vector_of(e.dtype):
                return b.load(b.bitcast(ptr, value_type(e.dtype).as_pointer()), align=4)
            return self.from_storage(b.load(ptr), self.dtypes[e.buffer])
        if isinstance(e, Splat):
            ty = value_type(e.dtype)
            one = b.insert_element(
                ir.Constant(ty, ir.Undefined), self.expr(e.a), ir.Constant(ir.IntType(32), 0)
            )
            return b.shuffle_vector(one, ir.Constant(ty, ir.Undefined), lane_mask([0] * ty.count))
        if isinstance(e, Shuffle):
            return b.shuffle_vector(self.expr(e.a), self.expr(e.b), lane_mask(e.mask))
        if isinstance(e, Cast):
            factors = rounded_product(e)
            if factors is not None:  # no `contract`: the product is rounded by itself
                return b.fmul(self.expr(factors[0]), self.expr(factors[1]))
            return self.cast(self.expr(e.a), e.a.dtype, e.dtype, e.exact)
        if isinstance(e, Select):
            return b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))
        if isinstance(e, Un):
            return self.unary(e)
        if isinstance(e, Bin):
            return self.binary(e)
        if isinstance(e, Dot4):
            return self.math.dot4(b, self.expr(e.acc), self.expr(e.a), self.expr(e.b), e.pairs)
        if isinstance(e, Lookup):
            value = self.math.tables.read(b, e.table, self.expr(e.index))
            return self.cast(value, "int32", e.dtype)
        raise TypeError(f"unknown expression {e!r}")

    def size(self, name: str) -> ir.Value:
        if name not in self.sizes:
            if name not in self.kernel.size_names:
                raise TypeError(f"kernel {self.kernel.name} reads size {name}, not one of its own")
            i64 = ir.IntType(64)
            slot = [ir.Constant(i64, 0), ir.Constant(i64, self.kernel.size_names.index(name))]
            ptr = self.entry_builder.gep(sizes_global(self.fn.module), slot, inbounds=True)
            self.sizes[name] = self.entry_builder.load(ptr, name=name)
        return self.sizes[name]

    def scalar(self, e: Load) -> ir.Value:
        """A value of the kernel's scalar buffers (codegen/lower/scalars.py), read once on
        entry: loop-invariant wherever it is used."""
        assert isinstance(e.index, Const), "a scalar buffer is read at constant slots"
        key = (e.buffer, int(e.index.value))
        if key not in self.scalar_values:
            index = ir.Constant(ir.IntType(64), key[1])
            ptr = self.entry_builder.gep(self.pointers[e.buffer], [index], inbounds=True)
            self.scalar_values[key] = self.entry_builder.load(ptr, name=f"{e.buffer}.{key[1]}")
        return self.scalar_values[key]

    def constant(self, value: Any, dtype: str) -> ir.Constant:
        vec = vector_of(dtype)
        if vec is not None:
            lane = self.constant(value, vec[0])
            return ir.Constant(value_type(dtype), [lane] * vec[1])
        ty = value_type(dtype)
        if dtype == "bool":
            return ir.Constant(ty, int(bool(value)))
        if _is_float(dtype):
            return ir.Constant(ty, float(value))
        return ir.Constant(ty, int(value))

    def from_storage(self, v: ir.Value, dtype: str) -> ir.Value:
        if dtype == "float16":
            return self.b.fpext(v, ir.FloatType())
        if dtype == "bool":
            return self.b.icmp_unsigned("!=", v, ir.Constant(ir.IntType(8), 0))
        return v

    def to_storage(self, v: ir.Value, value_dtype: str, buffer_dtype: str) -> ir.Value:
        if value_dtype != buffer_dtype:
            v = self.cast(v, value_dtype, buffer_dtype)
        if buffer_dtype == "float16":
            return self.b.fptrunc(v, ir.HalfType())
        if buffer_dtype == "bool":
            return self.b.zext(v, ir.IntType(8))
        return v

    def cast(self, v: ir.Value, src: str, dst: str, exact: bool = False) -> ir.Value:
        b = self.b
        if dst == "float16" and src != "float16":  # computed in float32, but rounded now
            # through float32: float <-> half are instructions (F16C/AVX-512), while
            # double -> half would call a compiler-rt helper the JIT cannot resolve
            single = self.cast(v, src, "float32")
            return b.fpext(b.fptrunc(single, ir.HalfType()), ir.FloatType())
        if src == dst or (value_type(src) == value_type(dst) and _is_float(src) == _is_float(dst)):
            return v
        st, dt = value_type(src), value_type(dst)
        if dst == "bool":
            if _is_float(src):
                return b.fcmp_unordered("!=", v, ir.Constant(st, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(st, 0))
        if src == "bool":
            return b.uitofp(v, dt) if _is_float(dst) else b.zext(v, dt)
        if _is_float(src) and _is_float(dst):
            return b.fpext(v, dt) if dst == "float64" else b.fptrunc(v, dt)
        if _is_float(src):
            return self.math.saturating_to_int(b, v, dt, not _unsigned(dst), exact)
        if _is_float(dst):
            return b.uitofp(v, dt) if _unsigned(src) else b.sitofp(v, dt)
        if dt.width < st.width:
            return b.trunc(v, dt)
        if dt.width > st.width:
            return b.zext(v, dt) if _unsigned(src) else b.sext(v, dt)
        return v

    def unary(self, e: Un) -> ir.Value:
        b, m = self.b, self.math
        x = self.expr(e.a)
        if e.op == "lanes_sum":  # a vector's lanes added pairwise into one scalar
            terms = [
                b.extract_element(x, ir.Constant(ir.IntType(32), k)) for k in range(x.type.count)
            ]
            while len(terms) > 1:
                terms = [
                    b.fadd(terms[k], terms[k + 1], flags=FLAGS) for k in range(0, len(terms), 2)
                ]
            return terms[0]
        dtype = e.a.dtype
        ty = value_type(dtype)
        if e.op == "not":
            return b.not_(x)
        if _is_float(dtype):
            if e.op == "neg":
                return b.fneg(x)
            if e.op == "abs":
                return m.call(b, "fabs", x)
            if e.op in ("sqrt", "floor", "ceil", "sin", "cos"):
                return m.call(b, e.op, x)
            if e.op == "round":
                return m.call(b, "rint", x)
            if e.op in ("exp", "log", "tanh", "sigmoid", "erf"):
                return getattr(m, e.op)(b, x)
            if e.op == "sign":
                one, zero = ir.Constant(ty, 1.0), ir.Constant(ty, 0.0)
                # +0.0 for both zeros (as numpy), NaN stays NaN
                rest = b.select(b.fcmp_ordered("==", x, zero), zero, x)
                pos = b.select(b.fcmp_ordered(">", x, zero), one, rest)
                return b.select(b.fcmp_ordered("<", x, zero), b.fneg(one), pos)
        else:
            zero = ir.Constant(ty, 0)
            if e.op == "neg":
                return b.sub(zero, x)
            if e.op == "abs":
                return (
                    x
                    if _unsigned(dtype)
                    else b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x)
                )
            if e.op == "sign":
                one = ir.Constant(ty, 1)
                pos = b.select(b.icmp_signed(">", x, zero), one, zero)
                return b.select(b.icmp_signed("<", x, zero), ir.Constant(ty, -1), pos)
        raise NotImplementedError(f"{e.op} on {dtype}")

    def binary(self, e: Bin) -> ir.Value:
        b = self.b
        x, y = self.expr(e.a), self.expr(e.b)
        dtype = e.a.dtype
        op = e.op
        if op in ("and", "or", "xor"):  # logical on bool, bitwise on integers
            return {"and": b.and_, "or": b.or_, "xor": b.xor}[op](x, y)
        if op in ("lt", "le", "gt", "ge", "eq", "ne"):
            sym = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}[op]
            if _is_float(dtype):
                return b.fcmp_unordered(sym, x, y) if op == "ne" else b.fcmp_ordered(sym, x, y)
            if dtype == "bool" or _unsigned(dtype):
                return b.icmp_unsigned(sym, x, y)
            return b.icmp_signed(sym, x, y)
        if _is_float(dtype):
            out = self.float_binary(op, x, y, isinstance(e.a, Ref) or isinstance(e.b, Ref))
        else:
            out = int_binary(b, self.math, op, dtype, x, y)
        if out is None:
            raise NotImplementedError(f"{op} on {dtype}")
        return out

    def float_binary(
        self, op: str, x: ir.Value, y: ir.Value, running: bool = True
    ) -> ir.Value | None:
        """`running`: an accumulator's update (reassociable, a reduction LLVM vectorises)."""
        b, flags = self.b, FLAGS if running else ELEMENTWISE_FLAGS
        if op == "add":
            return b.fadd(x, y, flags=flags)
        if op in ("sub", "mul"):
            return (b.fsub if op == "sub" else b.fmul)(x, y, flags=flags)
        if op == "div":
            return b.fdiv(x, y)
        if op == "rem":  # C fmod: the dividend's sign
            return b.frem(x, y)
        if op in ("pow", "maxnum"):  # maxnum skips NaN: vectorises as a reduction
            return self.math.call(b, op, x, y)
        if op in ("max", "min") and running:  # llvm.maximum: vectorises as a reduction
            return self.math.call(b, "maximum" if op == "max" else "minimum", x, y)
        if op in ("max", "min"):  # numpy's (NaN wins, a tie gives y); x86 expands the
            larger = b.fcmp_ordered(">" if op == "max" else "<", x, y)  # intrinsic 2x longer
            return b.select(b.or_(larger, self.math.isnan(b, x)), x, y)
        return None
