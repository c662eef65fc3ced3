"""Patterns and rewrites as data: what the rules layer hands to the e-graph bridge.

A pattern is a tree of PCall (an op with tensor arguments and attributes), PVar (`?x`, a
tensor) and PLit (a number: on the left it matches a constant whose elements all equal it,
on the right it makes a scalar constant of the result's dtype). Attribute values are Python
values or AttrVar (`?p`, bound to the attribute's value).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class PVar:
    name: str


@dataclass(frozen=True, slots=True)
class AttrVar:
    name: str


@dataclass(frozen=True, slots=True)
class AttrExpr:
    """A right-hand side's computed attribute value (`newshape=[dim(?x, 0), -1]`): the
    guard language's expression over the match, evaluated when the rule applies."""

    text: str
    evaluate: Callable[[Match], Any] = field(compare=False, hash=False)


def resolve_attr(value: Any, match: Match) -> Any:
    """An attribute value of a right-hand side with its variables and expressions
    replaced by what the match binds (lists element by element)."""
    if isinstance(value, AttrVar):
        return match.attrs[value.name]
    if isinstance(value, AttrExpr):
        result = value.evaluate(match)
        if result is None:
            raise ValueError(f"{value.text} has no value here")
        return result
    if isinstance(value, tuple):
        return tuple(resolve_attr(v, match) for v in value)
    return value


def computed(value: Any) -> bool:
    """Does an attribute value hold a computed expression (checked when the rule fires)?"""
    if isinstance(value, tuple):
        return any(computed(v) for v in value)
    return isinstance(value, AttrExpr)


@dataclass(frozen=True, slots=True)
class PLit:
    value: float


@dataclass(frozen=True, slots=True)
class PGet:
    """Field `index` of a tuple-valued pattern (`batch_norm(...).0`)."""

    tuple_value: Pattern
    index: int


@dataclass(frozen=True, slots=True)
class PCall:
    op: str
    args: tuple[Pattern, ...]
    attrs: tuple[tuple[str, Any], ...] = ()  # (name, value or AttrVar), in any order

    def attr_map(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True, slots=True)
class POpt:
    """`op?(x, ...)` in a pattern table (never in a rewrite rule): matches `op(x, ...)` or,
    when that fails, the first argument alone (an optional bias or activation)."""

    call: PCall


Pattern = PVar | PLit | PCall | PGet | POpt


def walk(p: Pattern) -> Iterator[Pattern]:
    """Every sub-pattern, parents first (patterns are small: recursion depth is bounded)."""
    stack = [p]
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, PCall):
            stack.extend(reversed(cur.args))
        elif isinstance(cur, PGet):
            stack.append(cur.tuple_value)
        elif isinstance(cur, POpt):
            stack.append(cur.call)


def tensor_vars(p: Pattern) -> list[str]:
    return list(dict.fromkeys(q.name for q in walk(p) if isinstance(q, PVar)))


def attr_vars(p: Pattern) -> list[str]:
    out: list[str] = []
    for q in walk(p):
        if isinstance(q, PCall):
            out.extend(v.name for _, v in q.attrs if isinstance(v, AttrVar))
    return list(dict.fromkeys(out))


class Match:
    """What a guard sees: the types, attribute values and constant values of the bindings."""

    def __init__(
        self, types: dict[str, Any], attrs: dict[str, Any], constants: dict[str, Any]
    ) -> None:
        self.types, self.attrs, self.constants = types, attrs, constants


Guard = Callable[[Match], bool]


@dataclass(frozen=True)
class Rewrite:
    """One directed rewrite. `guard` sees a Match; `location` is `file:line` for reports."""

    name: str
    lhs: PCall | PGet
    rhs: Pattern
    guard: Guard | None = None
    location: str = ""
    tags: tuple[str, ...] = field(default=())
