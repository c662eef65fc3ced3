"""Tensors over symbolic shapes as z3 terms: what the tensor prover (rules/shape_proofs/prover.py)
says to z3 about ops that move or combine elements.

A tensor is its shape (z3 integers: a variable's dims are unknowns >= 1) and its element
at a symbolic index. A rule variable of rank r is a function of r integers that z3 knows
nothing of, so a proof holds for every tensor of every shape at that rank. Data movement
is an index map: transpose permutes the index, broadcasting pins a dim of 1 to 0,
reshape goes through the row-major offset (an offset split back into an index is one set
of fresh unknowns per offset and shape, bounded and constrained to recombine to it, so a
reshape of a reshape reads the same element without nonlinear reasoning). Pointwise ops
use the scalar encodings of rules/smt.py at the index. A reduction, and a product's sum
over k, is one function z3 knows nothing of, applied to the reduced elements in axis
order (`Lambda` over the reduced indices): two sums are equal where their terms are.

Where a side is ill-typed at some dims (a reshape whose sizes differ, a broadcast of 3
against 4), its `typing` condition says so: for the left side it is a hypothesis (the
rule never fires there), for the right an obligation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from egraph_ir.egraph.pattern import AttrExpr, AttrVar, Match, Pattern, PCall, PLit, PVar
from egraph_ir.registry import REQUIRED, get_op

from ..smt import COMPARISONS, FRAGMENT, LOGICAL, Encoder, OutsideFragment, pointwise
from .guards import SymInt

REDUCTIONS = {"sum", "mean", "max", "min", "prod"}
MOVEMENT = {
    "transpose", "reshape", "flatten", "expand_dims", "squeeze", "broadcast_to",
    "concatenate", "layout_transform",
}  # fmt: skip
TENSOR_OPS = MOVEMENT | REDUCTIONS | {"bias_add", "dense", "matmul"}


class NeedsAttr(Exception):
    """An attribute variable met unbound: the prover tries each value it can take here."""

    def __init__(self, name: str, op: str, attribute: str, ranks: list[int]) -> None:
        super().__init__(name)
        self.name, self.op, self.attribute, self.ranks = name, op, attribute, ranks


class IllTyped(Exception):
    """A side is ill-typed at every size of these ranks (a permutation of the wrong length)."""


@dataclass
class Shaped:
    """A variable's type as a guard reads it: shape (SymInts) and dtype."""

    shape: tuple[SymInt, ...]
    dtype: str


class _AnyConstant(dict):
    """Constants as a proof sees them: any variable may be one (is_const holds), whose
    values no guard reads here (guards on values are checked on a counterexample)."""

    def __contains__(self, key: object) -> bool:
        return True


ANY_CONSTANT = _AnyConstant()


@dataclass
class Tensor:
    shape: list[Any]  # z3 integer terms
    at: Callable[[list[Any]], Any]  # index (z3 integers) -> element
    dtype: str


class TensorEncoder:
    """One side at a time: `side(p)` gives its tensor and the condition that it is well typed."""

    def __init__(
        self,
        z3: Any,
        scalar: Encoder,
        ranks: dict[str, int],
        attrs: dict[str, Any],
        ops: dict[str, Callable[..., Tensor]],
    ) -> None:
        self.z3, self.scalar, self.ranks, self.attrs, self.ops = z3, scalar, ranks, attrs, ops
        self.dims: dict[str, list[Any]] = {}
        self.functions: dict[str, Any] = {}
        self.facts: list[Any] = []  # true by construction (an offset's index recombines)
        self.typing: list[Any] = []  # the current side is well typed
        self.on_left = True
        # left-side calls that leave attributes out: id(call) -> attribute -> variable
        self.implicit: dict[int, dict[str, str]] = {}
        self.ranks_here: list[int] = []  # the input ranks of the op being encoded
        self._representations: dict[int, list[tuple[list[Any], list[Any], Any]]] = {}
        self._splits: dict[Any, tuple[Any, ...]] = {}
        self._offsets: dict[tuple[int, ...], tuple[Any, list[Any]]] = {}

    # ------------------------------------------------------------ sides and variables
    def side(self, p: Pattern, dtype: str, left: bool) -> tuple[Tensor, Any]:
        self.typing, self.on_left = [], left
        try:
            t = self.encode(p, dtype)
        except IllTyped:
            return Tensor([], lambda i: self.scalar.constant(0, dtype), dtype), self.z3.BoolVal(
                False
            )
        return t, self.z3.And(True, *self.typing)

    def variable(self, name: str) -> Tensor:
        z3, rank = self.z3, self.ranks[name]
        if name not in self.dims:
            self.dims[name] = [z3.Int(f"{name}.d{k}") for k in range(rank)]
            self.facts += [d >= 1 for d in self.dims[name]]
            sort = self.scalar.sort(self.scalar.types[name])
            self.functions[name] = z3.Function(name, *([z3.IntSort()] * rank), sort)
        fn = self.functions[name]
        return Tensor(
            list(self.dims[name]), lambda i: fn(*i) if i else fn(), self.scalar.types[name]
        )

    def sym(self, shape: list[Any]) -> tuple[SymInt, ...]:
        return tuple(SymInt(d, 1) for d in shape)

    def match(self) -> Match:
        """The bindings as a guard sees them, dims as SymInts (any of them a constant)."""
        types = {
            n: Shaped(self.sym(self.variable(n).shape), self.scalar.types[n]) for n in self.ranks
        }
        return Match(types, self.attrs, ANY_CONSTANT)

    def attr(self, p: PCall, name: str) -> Any:
        """An attribute's value: given, an attribute variable's choice, computed, or where
        the pattern leaves it out, any value on the left (the e-graph matches any) and
        the op's default on the right."""
        given = dict(p.attrs)
        if name not in given:
            if self.on_left:
                names = self.implicit.setdefault(id(p), {})
                names.setdefault(name, f"{name} of {p.op} #{len(self.implicit)}")
                given[name] = AttrVar(names[name])
            else:
                default = next((a.default for a in get_op(p.op).attrs if a.name == name), REQUIRED)
                if default is REQUIRED:
                    raise IllTyped
                return default
        value = given[name]
        if isinstance(value, AttrVar):
            if value.name not in self.attrs:
                raise NeedsAttr(value.name, p.op, name, self.ranks_here)
            return self.attrs[value.name]
        if isinstance(value, AttrExpr):
            return value.evaluate(self.match())
        if isinstance(value, tuple) and any(isinstance(v, AttrExpr | AttrVar) for v in value):
            return tuple(self.attr(PCall(p.op, (), (("v", v),)), "v") for v in value)
        return value

    # ------------------------------------------------------------ patterns
    def encode(self, p: Pattern, dtype: str) -> Tensor:
        if isinstance(p, PVar):
            return self.variable(p.name)
        if isinstance(p, PLit):
            return Tensor([], lambda i: self.scalar.constant(p.value, dtype), dtype)
        if not isinstance(p, PCall):
            raise OutsideFragment(f"{type(p).__name__} patterns are outside the prover's fragment")
        sibling = next((self.scalar.types[a.name] for a in p.args if isinstance(a, PVar)), dtype)
        args = [
            self.encode(a, sibling if sibling != "bool" or p.op in LOGICAL else dtype)
            for a in p.args
        ]
        if p.op in FRAGMENT or pointwise(p.op):
            return self.elementwise(p, args)
        if p.op not in self.ops:
            raise OutsideFragment(f"op {p.op} is outside the prover's fragment")
        self.ranks_here = [len(a.shape) for a in args]
        return self.ops[p.op](self, p, *args)

    def elementwise(self, p: PCall, args: list[Tensor]) -> Tensor:
        shape = self.broadcast([a.shape for a in args])
        dtype = _result_dtype(p, args, self.attr)

        def at(i: list[Any]) -> Any:
            values = [(a.at(self.broadcast_index(a.shape, i)), a.dtype) for a in args]
            return self.scalar.op(p, values)[0]

        return Tensor(shape, at, dtype)

    def broadcast(self, shapes: list[list[Any]]) -> list[Any]:
        z3 = self.z3
        rank = max((len(s) for s in shapes), default=0)
        out: list[Any] = []
        for k in range(rank):
            dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
            d = dims[0]
            for e in dims[1:]:
                self.typing.append(z3.Or(d == e, d == 1, e == 1))
                d = z3.If(d == 1, e, d)
            out.append(z3.simplify(d))
        return out

    def broadcast_index(self, shape: list[Any], i: list[Any]) -> list[Any]:
        z3 = self.z3
        i = i[len(i) - len(shape) :]
        return [z3.If(d == 1, 0, j) for d, j in zip(shape, i, strict=True)]

    # ------------------------------------------------------------ offsets
    def offset(self, i: list[Any], shape: list[Any]) -> Any:
        """The row-major offset of index i (the one an index came from, when it was split)."""
        known = self._splits.get(tuple(x.get_id() for x in i))
        if known is not None and _same(self.z3, known[1], shape):
            return known[0]
        f: Any = self.z3.IntVal(0)
        for j, d in zip(i, shape, strict=True):
            f = f * d + j
        self._represent(f, i, shape)
        return f

    def _represent(self, f: Any, i: list[Any], shape: list[Any]) -> None:
        """Note that index i of `shape` has offset f, with the fact that any other index
        of an equal shape with that offset is i (a row-major offset has one index per
        shape: what z3 would need nonlinear reasoning to find)."""
        z3 = self.z3
        inside = z3.And(True, *(z3.And(j >= 0, j < d) for j, d in zip(i, shape, strict=True)))
        for other, other_shape, other_inside in self._representations.get(f.get_id(), []):
            if len(other) == len(i) and other is not i:
                same = [a == b for a, b in zip(shape, other_shape, strict=True)]
                equal = [a == b for a, b in zip(i, other, strict=True)]
                self.facts.append(
                    z3.Implies(z3.And(inside, other_inside, *same), z3.And(True, *equal))
                )
        self._representations.setdefault(f.get_id(), []).append((i, shape, inside))

    def split(self, f: Any, shape: list[Any], typed: Any) -> list[Any]:
        """The index of offset f in `shape`: fresh unknowns, one set per offset and shape,
        that recombine to f wherever the side is well typed up to here (`typed`)."""
        z3 = self.z3
        key = (f.get_id(), *(d.get_id() for d in shape))
        if key in self._offsets:
            return self._offsets[key][1]
        index = [z3.FreshInt("k") for _ in shape]
        recombined = self.offset(index, shape)
        bounds = [z3.And(k >= 0, k < d) for k, d in zip(index, shape, strict=True)]
        self.facts.append(z3.Implies(typed, z3.And(recombined == f, *bounds)))
        self._represent(f, index, shape)
        self._offsets[key] = (f, index)
        self._splits[tuple(x.get_id() for x in index)] = (f, list(shape))
        return index

    def regroup(self, x: Tensor, shape: list[Any]) -> Tensor:
        """x's elements in row-major order as a tensor of `shape` (same size: a typing)."""
        self.typing.append(product(self.z3, shape) == product(self.z3, x.shape))
        typed = self.z3.And(True, *self.typing)
        return Tensor(
            shape, lambda i: x.at(self.split(self.offset(i, shape), x.shape, typed)), x.dtype
        )


def _result_dtype(p: PCall, args: list[Tensor], attr: Callable[..., Any]) -> str:
    if p.op in LOGICAL or p.op in COMPARISONS:
        return "bool"
    if p.op == "cast":
        return str(attr(p, "dtype"))
    if p.op == "where":
        return args[1].dtype
    return args[-1].dtype if args else "float32"


def product(z3: Any, dims: list[Any]) -> Any:
    out: Any = z3.IntVal(1)
    for d in dims:
        out = out * d
    return z3.simplify(out)


def _same(z3: Any, a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        z3.eq(z3.simplify(x), z3.simplify(y)) for x, y in zip(a, b, strict=True)
    )


def axis_of(a: int, rank: int) -> int:
    """An axis counted from 0 (a negative one from the end); out of range: ill-typed."""
    if not -rank <= a < rank:
        raise IllTyped
    return a % rank


def as_tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v) if isinstance(v, tuple | list) else (v,)


__all__ = [
    "ANY_CONSTANT",
    "MOVEMENT",
    "Shaped",
    "TENSOR_OPS",
    "IllTyped",
    "NeedsAttr",
    "Tensor",
    "TensorEncoder",
    "as_tuple",
    "axis_of",
    "product",
]
