"""What the emitter (codegen/llvm/emit.py) may share instead of emitting again: equal
expressions of loop variables, sizes and constants (one key each), and locals that are
set once and read only where that definition reaches (plain values, not stack slots).

Kernel builders recompute the same index arithmetic for every load (a Winograd transform's
36 addresses, a register block's rows) and declare named temporaries for every transform
step; emitted as written that was 2.6 MB of LLVM IR for ResNet-18's kernels, most of it
arithmetic LLVM then removed again.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import fields
from typing import Any

import numpy as np

from ..loop_ir import (
    Assign,
    Bin,
    Cast,
    Const,
    Declare,
    For,
    LExpr,
    LoopVar,
    Ref,
    Select,
    Size,
    Splat,
    Stmt,
    Store,
    Un,
    operands,
    unseen_post_order,
)

# expressions computed from loop variables, sizes and constants only: equal ones share a key
STRUCTURAL = (Const, LoopVar, Size, Bin, Un, Select, Cast, Splat)


class StructuralKeys:
    """key(e): one key for equal index arithmetic built twice, so it is emitted once per
    scope; any expression that reads memory keeps its identity (a store may come between),
    as does one with an unhashable attribute."""

    def __init__(self) -> None:
        # id -> (key, the expression): kept alive, so no later expression takes its id
        self.keys: dict[int, tuple[int, LExpr]] = {}
        self.interned: dict[tuple[Any, ...], int] = {}

    def key(self, e: LExpr) -> int:
        known = self.keys.get(id(e))
        if known is not None:
            return known[0]
        key = id(e)
        if isinstance(e, STRUCTURAL):
            parts: list[Any] = [type(e)]
            for f in fields(e):
                value = getattr(e, f.name)
                if isinstance(value, LExpr):
                    value = self.key(value)
                elif isinstance(value, float | np.floating):  # -0.0 is not 0.0 here
                    value = repr(float(value))
                parts.append(value)
            with contextlib.suppress(TypeError):
                key = self.interned.setdefault(tuple(parts), -1 - len(self.interned))
        self.keys[id(e)] = (key, e)
        return key


def single_assignment(body: list[Stmt]) -> set[str]:
    """Locals declared once, never assigned, and read only after their Declare in the
    statement list that holds it (or lists nested in it): their value can be the SSA value
    itself, which dominates every read (a read after the loop that declares it would not
    be dominated, nor would one in a later iteration: those need an Assign)."""
    declared: Counter[str] = Counter()
    assigned: set[str] = set()
    unreached: set[str] = set()
    active: list[set[str]] = []  # names declared so far in each enclosing list

    refs = _RefsRead()

    def read(e: LExpr | None) -> None:
        for name in refs.of(e) if e is not None else ():
            if not any(name in names for names in active):
                unreached.add(name)

    def visit(stmts: list[Stmt]) -> None:
        active.append(set())
        for s in stmts:
            if isinstance(s, For):
                read(s.stop)
                visit(s.body)
            elif isinstance(s, Declare):
                read(s.init)
                declared[s.name] += 1
                active[-1].add(s.name)
            elif isinstance(s, Assign):
                read(s.value)
                assigned.add(s.name)
            elif isinstance(s, Store):
                read(s.index)
                read(s.value)
        active.pop()

    visit(body)
    return {n for n, k in declared.items() if k == 1 and n not in assigned | unreached}


class _RefsRead:
    """The locals an expression reads, each shared operand looked at once (an int8
    epilogue reads one requantized value in a clamp, a select and a store: walked as a
    tree, its operands were visited hundreds of times)."""

    def __init__(self) -> None:
        self.known: dict[int, tuple[frozenset[str], LExpr]] = {}  # id -> (names, kept alive)

    def of(self, root: LExpr) -> frozenset[str]:
        for e in unseen_post_order(root, self.known):
            names = frozenset([e.name]) if isinstance(e, Ref) else frozenset()
            for x in operands(e):
                names |= self.known[id(x)][0]
            self.known[id(e)] = (names, e)
        return self.known[id(root)][0]
