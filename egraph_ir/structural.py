"""Structural equality and hashing up to renaming of bound variables (alpha-equivalence).

Both walk explicit stacks. Sharing does not matter: a DAG equals the tree it unfolds to.
Constants compare by dtype, shape and values (NaN equals NaN).
"""

from __future__ import annotations

import hashlib

import numpy as np

from .expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    children,
)
from .module import IRModule
from .visitor import post_order


def structural_equal(a: Expr | IRModule, b: Expr | IRModule) -> bool:
    """True when a and b are the same program up to the names of variables."""
    if isinstance(a, IRModule) or isinstance(b, IRModule):
        if not (isinstance(a, IRModule) and isinstance(b, IRModule)):
            return False
        if set(a) != set(b):
            return False
        return all(_Equal().run(a[name], b[name]) for name in a)
    return _Equal().run(a, b)


def constants_equal(x: np.ndarray, y: np.ndarray) -> bool:
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))


class _Equal:
    def __init__(self) -> None:
        self.fwd: dict[Var, Var] = {}
        self.back: dict[Var, Var] = {}

    def bind(self, x: Var, y: Var) -> bool:
        if x in self.fwd or y in self.back:
            return self.fwd.get(x) is y
        if x.type_annotation != y.type_annotation:
            return False
        self.fwd[x], self.back[y] = y, x
        return True

    def run(self, a: Expr, b: Expr) -> bool:
        stack: list[tuple[Expr, Expr]] = [(a, b)]
        seen: set[tuple[int, int]] = set()
        while stack:
            x, y = stack.pop()
            key = (id(x), id(y))
            if key in seen:
                continue
            seen.add(key)
            if type(x) is not type(y):
                return False
            pairs = self.local(x, y)
            if pairs is None:
                return False
            stack.extend(reversed(pairs))
        return True

    def local(self, x: Expr, y: Expr) -> list[tuple[Expr, Expr]] | None:
        """Compare the node's own fields; return the child pairs to compare, or None."""
        match x:
            case Var():
                return [] if self.bind(x, y) else None  # type: ignore[arg-type]
            case Constant():
                return [] if constants_equal(x.data, y.data) else None  # type: ignore[attr-defined]
            case GlobalVar():
                return [] if x.name_hint == y.name_hint else None  # type: ignore[attr-defined]
            case Call():
                assert isinstance(y, Call)
                if len(x.args) != len(y.args) or x.attrs != y.attrs:
                    return None
                pairs = list(zip(x.args, y.args, strict=True))
                if isinstance(x.op, Expr) and isinstance(y.op, Expr):
                    return [(x.op, y.op), *pairs]
                return pairs if x.op is y.op else None
            case Tuple():
                assert isinstance(y, Tuple)
                if len(x.fields) != len(y.fields):
                    return None
                return list(zip(x.fields, y.fields, strict=True))
            case TupleGetItem():
                assert isinstance(y, TupleGetItem)
                return [(x.tuple_value, y.tuple_value)] if x.index == y.index else None
            case Function():
                assert isinstance(y, Function)
                if len(x.params) != len(y.params) or x.ret_type != y.ret_type or x.attrs != y.attrs:
                    return None
                if not all(self.bind(p, q) for p, q in zip(x.params, y.params, strict=True)):
                    return None
                return [(x.body, y.body)]
            case Let():
                assert isinstance(y, Let)
                if not self.bind(x.var, y.var):
                    return None
                return [(x.value, y.value), (x.body, y.body)]
            case If():
                assert isinstance(y, If)
                return [
                    (x.cond, y.cond),
                    (x.true_branch, y.true_branch),
                    (x.false_branch, y.false_branch),
                ]
        return None


def structural_hash(e: Expr | IRModule) -> int:
    """A hash consistent with structural_equal (bound variables hash by their type only)."""
    if isinstance(e, IRModule):
        return hash(tuple(sorted((n, structural_hash(f)) for n, f in e.items())))
    h: dict[Expr, int] = {}
    for node in post_order(e):
        h[node] = _node_hash(node, h)
    return h[e]


def _node_hash(node: Expr, h: dict[Expr, int]) -> int:
    kids = tuple(h[c] for c in children(node))
    match node:
        case Var():
            return hash(("var", node.type_annotation))
        case Constant():
            digest = hashlib.blake2b(node.data.tobytes(), digest_size=8).digest()
            return hash(("const", str(node.data.dtype), node.data.shape, digest))
        case GlobalVar():
            return hash(("global", node.name_hint))
        case Call():
            op = node.op.name if not isinstance(node.op, Expr) else "fn"
            return hash(("call", op, node.attrs, kids))
        case TupleGetItem():
            return hash(("getitem", node.index, kids))
        case Function():
            return hash(("fn", node.ret_type, node.attrs, kids))
    return hash((type(node).__name__, kids))
