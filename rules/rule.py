"""Rule and RuleSet: rules as values, grouped, filtered by tag and combined."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from egraph_ir.egraph import PCall, PGet, Rewrite
from egraph_ir.egraph.pattern import Pattern
from egraph_ir.errors import RuleError, Span

from .guards import GuardExpr, all_of

FAST_MATH = "fast-math"
QUANTIZE = "quantize"  # float and integer forms of a quantised op: equal within one quantum
NSZ = "nsz"  # the rule may change the sign of a zero (LLVM's nsz): runs only under fast-math


@dataclass(frozen=True)
class Rule:
    """One named, tagged rewrite with its guards and where it was written."""

    name: str
    tags: tuple[str, ...]
    lhs: Pattern
    rhs: Pattern
    bidirectional: bool
    guards: tuple[GuardExpr, ...]
    span: Span

    @property
    def location(self) -> str:
        return str(self.span)

    def rewrites(self) -> list[Rewrite]:
        """The directed rewrites (two for `<=>`); guards apply in both directions."""
        guard = all_of(list(self.guards))
        out = [Rewrite(self.name, self.lhs, self.rhs, guard, self.location, self.tags)]  # type: ignore[arg-type]
        if self.bidirectional:
            reverse_lhs = self.rhs
            assert isinstance(reverse_lhs, PCall | PGet)  # the reader checks this for <=>
            out.append(
                Rewrite(f"{self.name}~rev", reverse_lhs, self.lhs, guard, self.location, self.tags)
            )
        return out


class RuleSet:
    """An ordered collection of uniquely named rules."""

    def __init__(self, rules: Iterable[Rule] = (), name: str = "") -> None:
        self.rules: list[Rule] = []
        self.name = name
        seen: dict[str, Rule] = {}
        for r in rules:
            if r.name in seen:
                raise RuleError(
                    f"{r.location}: duplicate rule name '{r.name}' (also at "
                    f"{seen[r.name].location})"
                )
            seen[r.name] = r
            self.rules.append(r)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __getitem__(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(f"no rule '{name}' in {self.name or 'this set'}")

    def __add__(self, other: RuleSet) -> RuleSet:
        return RuleSet([*self.rules, *other.rules], f"{self.name}+{other.name}".strip("+"))

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def by_tag(self, *tags: str) -> RuleSet:
        """Rules carrying any of the tags."""
        return RuleSet([r for r in self.rules if set(tags) & set(r.tags)], self.name)

    def without_tag(self, *tags: str) -> RuleSet:
        return RuleSet([r for r in self.rules if not set(tags) & set(r.tags)], self.name)

    def enabled(self, fast_math: bool) -> RuleSet:
        """The rules that may run: fast-math and nsz ones only when fast_math is set."""
        return self if fast_math else self.without_tag(FAST_MATH, NSZ)

    def rewrites(self) -> list[Rewrite]:
        return [rw for r in self.rules for rw in r.rewrites()]

    def __repr__(self) -> str:
        return f"RuleSet({self.name!r}, {len(self.rules)} rules)"
