"""A kernel's scalar constants as a small buffer the call binds, so that layers of one form
share compiled code.

The layers of a quantised network differ in their scales, multipliers and zero points and
in nothing else: baked into the code, each is a kernel of its own (ViT-tiny's int8 build
emitted 71 kernels where its float build emits 16, and LLVM spent most of the compile on
them). After lowering, each such constant becomes a read of the kernel's `s_<dtype>`
buffer, whose values the launch binds as a constant (`Kernel.scalars`); kernels whose
bodies are then equal compile once (build.share_identical_kernels). The emitter reads
each on entry (codegen/llvm/emit.py), so loops see a loop-invariant value.

Kept in the code, where LLVM turns the constant into better code: integer divisors (a
multiply and shift), power-of-two float divisors (a multiply), exponents (x * x for
pow(x, 2)), index arithmetic, and the values every layer shares (0, 1, -1, 0.5, 2 and
the integer types' bounds, the clamps of requantization).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from functools import cache

import numpy as np

from ..loop_ir import (
    INDEX,
    Assign,
    Bin,
    Buffer,
    Cast,
    Const,
    Declare,
    For,
    Kernel,
    LExpr,
    Load,
    Stmt,
    Store,
    operands,
    unseen_post_order,
)
from ..loop_ir import walk as walk_body
from .kinds import CompiledKernel

DTYPES = ("float32", "float64", "int32", "int16", "int8", "uint8")
_SHARED_FLOATS = frozenset({0.0, 1.0, -1.0, 0.5, 2.0})


def hoist_scalars(compiled: CompiledKernel) -> None:
    """Every JIT kernel of a lowered group with its varying scalar constants read from
    buffers (in place; the launches bind the values: kinds.Launch)."""
    for kernel in compiled.jit_kernels():
        hoist(kernel)


def hoist(kernel: Kernel) -> None:
    """`kernel` with its varying scalar constants read from `s_<dtype>` buffers."""
    pinned = _pinned(kernel.body)
    slots: dict[tuple[str, object], LExpr] = {}
    values: dict[str, list[object]] = {}

    def slot_of(e: LExpr) -> LExpr | None:
        if not isinstance(e, Const) or id(e) in pinned or not _varies(e):
            return None
        # a float64 that is a float32 (a widened scale) stays a widened float32: the
        # emitter's rounded products (loop_ir.rounded_product) read it so
        dtype = "float32" if _a_float32(e) else e.dtype
        key = (dtype, _identity(e.value))
        if key not in slots:
            column = values.setdefault(dtype, [])
            slots[key] = Load(dtype, f"s_{dtype}", Const(INDEX, len(column)))
            column.append(e.value)
        return slots[key] if dtype == e.dtype else Cast(e.dtype, slots[key])

    body = _Rewriter(slot_of).body(kernel.body)
    if not values:
        return
    kernel.body = body
    kernel.body_key = ""
    for dtype, column in values.items():
        name = f"s_{dtype}"
        kernel.buffers.append(Buffer(name, dtype, (len(column),)))
        kernel.scalars[name] = np.array(column, dtype=dtype)


def _varies(e: Const) -> bool:
    """A constant worth a slot: of a dtype kept in buffers and not one every layer shares."""
    if e.dtype not in DTYPES or isinstance(e.value, bool):
        return False
    if e.dtype.startswith("float"):
        return float(e.value) not in _SHARED_FLOATS  # -0.0 too (equal to 0.0)
    value = int(e.value)
    low, high = _bounds(e.dtype)
    return low <= value <= high and value not in _shared_ints()


def _pinned(body: list[Stmt]) -> set[int]:
    """Constants LLVM needs as constants: integer divisors, power-of-two float divisors
    and exponents."""
    pinned: set[int] = set()
    for e in walk_body(body)[1]:
        if not isinstance(e, Bin) or not isinstance(e.b, Const):
            continue
        integral = not e.dtype.startswith("float")
        divisor = e.op in ("div", "rem") and integral
        if e.op == "pow" or divisor or (e.op == "div" and _power_of_two(float(e.b.value))):
            pinned.add(id(e.b))
    return pinned


def _a_float32(e: Const) -> bool:
    return e.dtype == "float64" and float(np.float32(e.value)) == float(e.value)


def _power_of_two(value: float) -> bool:
    mantissa, _ = math.frexp(abs(value))
    return value != 0 and mantissa == 0.5


def _identity(value: object) -> object:
    """Equal slots for equal values, -0.0 apart from 0.0 and NaN equal to NaN."""
    return repr(float(value)) if isinstance(value, float | np.floating) else value


def _bounds(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


@cache
def _shared_ints() -> frozenset[int]:
    bounds = {v for t in ("int8", "uint8", "int16", "uint16", "int32") for v in _bounds(t)}
    return frozenset({0, 1, -1} | bounds)


class _Rewriter:
    """Statements and expressions rebuilt with some leaves replaced, each shared
    expression once (by a worklist: fused chains are deep)."""

    def __init__(self, leaf: Callable[[LExpr], LExpr | None]) -> None:
        self.leaf = leaf
        self.done: dict[int, tuple[LExpr, LExpr]] = {}  # id -> (new, old kept alive)

    def body(self, stmts: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, For):
                stop = None if s.stop is None else self.expr(s.stop)
                out.append(replace(s, body=self.body(s.body), stop=stop))
            elif isinstance(s, Store):
                out.append(Store(s.buffer, self.expr(s.index), self.expr(s.value)))
            elif isinstance(s, Declare):
                out.append(Declare(s.name, self.expr(s.init)))
            elif isinstance(s, Assign):
                out.append(Assign(s.name, self.expr(s.value)))
            else:
                out.append(s)
        return out

    def expr(self, root: LExpr) -> LExpr:
        for e in unseen_post_order(root, self.done):
            self.done[id(e)] = (self._rebuilt(e), e)
        return self.done[id(root)][0]

    def _rebuilt(self, e: LExpr) -> LExpr:
        replaced = self.leaf(e)
        if replaced is not None:
            return replaced
        old = operands(e)
        new = tuple(self.done[id(x)][0] for x in old)
        if all(a is b for a, b in zip(old, new, strict=True)):
            return e
        return _with_operands(e, new)


def _with_operands(e: LExpr, new: tuple[LExpr, ...]) -> LExpr:
    names = [f.name for f in fields(e) if f.type == "LExpr"]
    return replace(e, **dict(zip(names, new, strict=True)))  # type: ignore[arg-type]
