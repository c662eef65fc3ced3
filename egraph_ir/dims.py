"""Symbolic dimensions: a size known by name until the program runs (`batch`, `seq`), and
integer expressions over such names (`seq + 1`, `batch * seq`, `floordiv(seq, 2)`).

A `Dim` is a polynomial with integer coefficients over atoms, each atom a size variable or
an exact floor quotient `floordiv(p, n)` of another polynomial by a positive constant.
Polynomials are kept in one normal form, so two dimensions are equal exactly when their
forms are: two tensors that share `seq` are known to have equal sizes there, and `seq + 1`
built twice is the same dimension. Every operation whose result is a constant returns a
plain int, so static shapes never hold a Dim.

Sizes are never negative, so an order is decided where the difference's coefficients all
have one sign (`seq >= 0`, `seq + 1 > 0`, `-seq - 1 < 0`); any other order is not (a
ShapeDecisionError says so), because the compiler must not choose by a comparison that
holds for some sizes only.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .errors import TypeInferenceError

T = TypeVar("T")
Monomial = tuple["Atom", ...]  # atoms of a product, sorted by their text
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ShapeDecisionError(TypeInferenceError):
    """A comparison of symbolic sizes that does not hold for every value they may take."""


@dataclass(frozen=True, slots=True)
class Quotient:
    """floordiv(numerator, divisor): an atom whose value is known once its inputs are."""

    numerator: Dim
    divisor: int

    def __str__(self) -> str:
        return f"floordiv({self.numerator}, {self.divisor})"


Atom = str | Quotient


def _constant(d: Dim) -> int:
    return dict(d.terms).get((), 0)


def _key(atom: Atom) -> str:
    return atom if isinstance(atom, str) else str(atom)


@dataclass(frozen=True, slots=True)
class Dim:
    """A symbolic size: sum of coefficient * product of atoms (see the module doc)."""

    terms: tuple[tuple[Monomial, int], ...]  # sorted, no zero coefficient, () the constant

    # ------------------------------------------------------------ construction
    @staticmethod
    def of(terms: Mapping[Monomial, int]) -> int | Dim:
        """The normal form of a polynomial: an int when it has no atom."""
        kept = sorted(
            ((m, c) for m, c in terms.items() if c != 0),
            key=lambda t: (t[0] == (), [_key(a) for a in t[0]]),  # the constant last
        )
        if not kept:
            return 0
        if len(kept) == 1 and kept[0][0] == ():
            return kept[0][1]
        return Dim(tuple(kept))

    @staticmethod
    def lift(value: int | Dim) -> Dim:
        """A number as a constant polynomial (for arithmetic)."""
        return value if isinstance(value, Dim) else Dim((((), int(value)),))

    def _table(self) -> dict[Monomial, int]:
        return dict(self.terms)

    # ------------------------------------------------------------ arithmetic
    def __add__(self, other: int | Dim) -> int | Dim:
        if not isinstance(other, int | Dim):
            return NotImplemented
        table = self._table()
        for m, c in Dim.lift(other).terms:
            table[m] = table.get(m, 0) + c
        return Dim.of(table)

    __radd__ = __add__

    def __neg__(self) -> int | Dim:
        return Dim.of({m: -c for m, c in self.terms})

    def __sub__(self, other: int | Dim) -> int | Dim:
        if not isinstance(other, int | Dim):
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other: int) -> int | Dim:
        return -self + other

    def __mul__(self, other: int | Dim) -> int | Dim:
        if not isinstance(other, int | Dim):
            return NotImplemented
        table: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in Dim.lift(other).terms:
                m = tuple(sorted(m1 + m2, key=_key))
                table[m] = table.get(m, 0) + c1 * c2
        return Dim.of(table)

    __rmul__ = __mul__

    def __floordiv__(self, other: int | Dim) -> int | Dim:
        if isinstance(other, Dim):
            raise ShapeDecisionError(f"cannot divide {self} by the symbolic size {other}")
        if not isinstance(other, int) or other <= 0:
            raise ShapeDecisionError(f"cannot divide {self} by {other}")
        if all(c % other == 0 for _, c in self.terms):
            return Dim.of({m: c // other for m, c in self.terms})
        return Dim.of({(Quotient(self, other),): 1})

    def __mod__(self, other: int) -> int | Dim:
        return self - (self // other) * other

    # ------------------------------------------------------------ order
    def __ge__(self, other: int | Dim) -> bool:
        difference = self - other
        if isinstance(difference, int):
            return difference >= 0
        if difference.nonnegative():
            return True
        if Dim.lift(-difference).nonnegative() and _constant(difference) < 0:
            return False
        raise ShapeDecisionError(f"cannot decide {self} >= {other} for every size")

    def __lt__(self, other: int | Dim) -> bool:
        return not self >= other

    def __gt__(self, other: int | Dim) -> bool:
        difference = self - other
        if isinstance(difference, int):
            return difference > 0
        if difference.nonnegative() and _constant(difference) > 0:
            return True
        if Dim.lift(-difference).nonnegative():
            return False
        raise ShapeDecisionError(f"cannot decide {self} > {other} for every size")

    def __le__(self, other: int | Dim) -> bool:
        return not self > other

    def __index__(self) -> int:
        raise ShapeDecisionError(f"the size {self} is only known when the program runs")

    def nonnegative(self) -> bool:
        """Every coefficient positive (sizes are): the value is never negative."""
        return all(c > 0 for _, c in self.terms)

    # ------------------------------------------------------------ names and values
    @property
    def names(self) -> set[str]:
        """The size variables this dimension depends on."""
        found: set[str] = set()
        for m, _ in self.terms:
            for atom in m:
                found |= {atom} if isinstance(atom, str) else atom.numerator.names
        return found

    def evaluate(self, sizes: Mapping[str, int]) -> int:
        """The value once every size variable is known."""
        return self.fold(int, sizes.__getitem__, operator.add, operator.mul, operator.floordiv)

    def fold(
        self,
        number: Callable[[int], T],
        size: Callable[[str], T],
        add: Callable[[T, T], T],
        mul: Callable[[T, T], T],
        floordiv: Callable[[T, int], T],
    ) -> T:
        """The polynomial computed in another domain: numbers and sizes made by `number`
        and `size`, combined by `add`, `mul` and `floordiv` (a kernel's index expression,
        LLVM instructions in the glue, or plain ints)."""
        total = number(0)
        for monomial, coefficient in self.terms:
            term = number(coefficient)
            for atom in monomial:
                if isinstance(atom, str):
                    factor = size(atom)
                else:
                    inner = atom.numerator.fold(number, size, add, mul, floordiv)
                    factor = floordiv(inner, atom.divisor)
                term = mul(term, factor)
            total = add(total, term)
        return total

    def __str__(self) -> str:
        parts = []
        for m, c in self.terms:
            atoms = " * ".join(_key(a) for a in m)
            if not atoms:
                body = str(abs(c))
            elif abs(c) == 1:
                body = atoms
            else:
                body = f"{abs(c)} * {atoms}"
            sign = "-" if c < 0 else "+"
            parts.append((sign, body))
        first_sign, first = parts[0]
        text = ("-" if first_sign == "-" else "") + first
        return text + "".join(f" {s} {b}" for s, b in parts[1:])

    def __repr__(self) -> str:  # shapes print as (batch, seq + 1, 768) in messages too
        return str(self)


DimLike = int | Dim


def size_var(name: str) -> Dim:
    """The dimension named `name` (a size known when the program runs)."""
    if not NAME.fullmatch(name):
        raise TypeInferenceError(f"a size variable is a name (letters, digits, _), got {name!r}")
    return Dim((((name,), 1),))


def as_dim(value: object) -> DimLike:
    """A shape entry: an int (numpy ints too), a Dim, or a name read as a size variable."""
    if isinstance(value, Dim):
        return value
    if isinstance(value, str):
        return size_var(value)
    return int(value)  # type: ignore[call-overload]


def evaluate(d: DimLike, sizes: Mapping[str, int]) -> int:
    return d if isinstance(d, int) else d.evaluate(sizes)


def is_static(shape: Iterable[DimLike]) -> bool:
    return all(isinstance(d, int) for d in shape)


Binding = tuple[tuple[DimLike, ...], tuple[int, ...], str]  # declared, actual, where


def bind_sizes(bindings: Iterable[Binding]) -> dict[str, int]:
    """The size variables that arrays of the `actual` shapes give to the `declared` ones
    (`where` names each in errors), every dimension checked: a disagreement (seq 37 in one
    input, 40 in another) is one clear error naming the dimension. A dimension that is an
    expression (past + 1) is checked once every input has bound its sizes."""
    sizes: dict[str, int] = {}
    pending: list[tuple[DimLike, int, str]] = []
    for declared, actual, where in bindings:
        _bind(declared, actual, sizes, where, pending)
    _check_pending(pending, sizes)
    return sizes


def _bind(
    declared: tuple[DimLike, ...],
    actual: tuple[int, ...],
    sizes: dict[str, int],
    where: str,
    pending: list[tuple[DimLike, int, str]],
) -> None:
    if len(declared) != len(actual):
        raise TypeInferenceError(
            f"{where}: rank {len(actual)} where the program expects "
            f"({', '.join(map(str, declared))})"
        )
    for d, n in zip(declared, actual, strict=True):
        name = _plain_name(d)
        if name is None:
            pending.append((d, n, where))
        elif sizes.setdefault(name, n) != n:
            raise TypeInferenceError(
                f"{where}: dimension '{name}' is {n} here but {sizes[name]} in an earlier input"
            )


def _plain_name(d: DimLike) -> str | None:
    """The name of a dimension that is one size variable, else None."""
    if isinstance(d, Dim) and len(d.terms) == 1 and d.terms[0][1] == 1:
        monomial = d.terms[0][0]
        if len(monomial) == 1 and isinstance(monomial[0], str):
            return monomial[0]
    return None


def _check_pending(pending: list[tuple[DimLike, int, str]], sizes: Mapping[str, int]) -> None:
    """Each (dimension, size, where) against the sizes the inputs bound: an expression of a
    size no input gives alone cannot be checked, which is an error naming it."""
    for d, n, where in pending:
        unknown = sorted(d.names - sizes.keys()) if isinstance(d, Dim) else []
        if unknown:
            raise TypeInferenceError(
                f"{where}: the dimension {d} names {', '.join(unknown)}, which no input "
                "gives on its own; give it as a plain size in some input"
            )
        want = evaluate(d, sizes)
        if want != n:
            raise TypeInferenceError(
                f"{where}: dimension {d} is {want}, but the input has {n} there"
            )


def divide_exact(total: DimLike, part: DimLike) -> DimLike | None:
    """total / part when the division leaves no remainder for every size (the -1 of a
    reshape: 128 * past + 128 elements in rows of past + 1), else None. Polynomial long
    division under a graded order, where a product's leading term is the product of the
    leading terms, so an exact quotient is always found. Numbers of another kind (the
    rule prover's unknown dims) divide by their own // and %."""
    if not isinstance(total, int | Dim) or not isinstance(part, int | Dim):
        return total // part if total % part == 0 else None
    if isinstance(part, int):
        if part == 0:
            return None
        if isinstance(total, int):
            return total // part if total % part == 0 else None
        return total // part if all(c % part == 0 for _, c in total.terms) else None
    quotient: DimLike = 0
    rest: DimLike = total
    for _ in range(64):  # a bound on the terms a size expression has
        if rest == 0:
            return quotient
        rest_m, rest_c = _leading(Dim.lift(rest))
        part_m, part_c = _leading(part)
        factor = _divide_monomial(rest_m, part_m)
        if factor is None or rest_c % part_c:
            return None
        step = Dim.of({factor: rest_c // part_c})
        quotient = quotient + step
        rest = rest - step * part
    return None


def _leading(d: Dim) -> tuple[Monomial, int]:
    return max(d.terms, key=lambda t: (len(t[0]), [_key(a) for a in t[0]]))


def _divide_monomial(m: Monomial, by: Monomial) -> Monomial | None:
    left = list(m)
    for atom in by:
        if atom not in left:
            return None
        left.remove(atom)
    return tuple(left)


def equal_sizes(a: DimLike, b: DimLike) -> bool:
    """a == b for every value of the sizes (ONNX shape code compares a size with -1, the
    "infer this axis" marker): true for one normal form, false where the order decides
    the difference is never 0 (a size against a negative number); anything else is not
    decided."""
    difference = a - b
    if isinstance(difference, int):
        return difference == 0
    try:
        if difference > 0 or difference < 0:
            return False
    except ShapeDecisionError:
        pass
    raise ShapeDecisionError(f"cannot decide {a} == {b} for every size")


def substitute(value: object, sizes: Mapping[str, int]) -> object:
    """An attribute value with every Dim in it replaced by its value (tuples walked)."""
    if isinstance(value, Dim):
        return value.evaluate(sizes)
    if isinstance(value, tuple):
        return tuple(substitute(v, sizes) for v in value)
    return value


def holds_dims(value: object) -> bool:
    """Some Dim is in this attribute value (tuples walked)."""
    if isinstance(value, Dim):
        return True
    return isinstance(value, tuple) and any(holds_dims(v) for v in value)


# ---------------------------------------------------------------- prices
TYPICAL_SIZE = 64  # what a size variable is worth to cost models when nothing says otherwise
_typical: dict[str, int] = {}


def typical(d: DimLike) -> int:
    """A dimension as a number to price work by (extraction, fusion choices): its value
    at the typical sizes (`typical_sizes`), TYPICAL_SIZE for a size not named there. Only
    costs read it; nothing that decides what a program computes does."""
    if isinstance(d, int):
        return d
    return d.evaluate({name: _typical.get(name, TYPICAL_SIZE) for name in d.names})


class typical_sizes:
    """`with typical_sizes({"seq": 128}):` prices programs at these sizes."""

    def __init__(self, sizes: Mapping[str, int]) -> None:
        self.sizes = dict(sizes)

    def __enter__(self) -> None:
        self.saved = dict(_typical)
        _typical.update(self.sizes)

    def __exit__(self, *exc: object) -> None:
        _typical.clear()
        _typical.update(self.saved)


# ---------------------------------------------------------------- as literals
DIM_TAG = "<Dim>"


def to_literal(d: Dim) -> tuple:
    """A Dim as nested tuples of strs and ints (the e-graph keeps attributes as literal
    text): (DIM_TAG, ((atoms, coefficient), ...)), a floordiv atom as (numerator, n)."""

    def atom(a: Atom) -> object:
        return a if isinstance(a, str) else (to_literal(a.numerator), a.divisor)

    return (DIM_TAG, tuple((tuple(atom(a) for a in m), c) for m, c in d.terms))


def from_literal(value: tuple) -> DimLike:
    """The Dim to_literal wrote."""

    def atom(a: str | tuple[tuple, int]) -> Atom:
        if isinstance(a, str):
            return a
        return Quotient(Dim.lift(from_literal(a[0])), a[1])

    return Dim.of({tuple(atom(a) for a in m): c for m, c in value[1]})
