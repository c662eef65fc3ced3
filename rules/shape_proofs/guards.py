"""Guards read over symbolic shapes: a rule's `where` lines as z3 conditions.

A guard is a Python closure over a Match (rules/guards.py). The tensor prover
(rules/shape_proofs/prover.py) hands it shapes whose dimensions are z3 integers (`SymInt`):
arithmetic on them builds terms, and each comparison the guard's code branches on is a
decision. `condition` runs the guard once per path through those decisions (the first run
takes every branch as true, the next ones flip the last untried branch) and returns the
disjunction of the paths on which it holds: exactly the dims for which the guard holds,
without re-implementing the guard language.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..smt import OutsideFragment

MAX_PATHS = 256


class _Paths:
    """The decisions of one run: a prefix to replay, then every new branch taken true."""

    current: _Paths | None = None

    def __init__(self, z3: Any, prefix: list[bool]) -> None:
        self.z3, self.prefix = z3, prefix
        self.taken: list[bool] = []
        self.conditions: list[Any] = []

    def decide(self, cond: Any) -> bool:
        cond = self.z3.simplify(cond)
        if self.z3.is_true(cond) or self.z3.is_false(cond):
            return self.z3.is_true(cond)
        k = len(self.taken)
        choice = self.prefix[k] if k < len(self.prefix) else True
        self.taken.append(choice)
        self.conditions.append(cond if choice else self.z3.Not(cond))
        return choice


class SymBool:
    """A comparison of dims; a guard branching on it makes a decision."""

    def __init__(self, term: Any) -> None:
        self.term = term

    def __bool__(self) -> bool:
        if _Paths.current is None:
            raise OutsideFragment("a symbolic comparison outside a guard")
        return _Paths.current.decide(self.term)


class SymInt:
    """An integer dimension as a z3 term, with a known lower bound (dims are >= 1) that
    settles comparisons with small constants without branching."""

    def __init__(self, term: Any, low: int | None = None) -> None:
        self.term, self.low = term, low

    @staticmethod
    def lift(z3: Any, v: Any) -> Any:
        return v.term if isinstance(v, SymInt) else z3.IntVal(int(v))

    def _z3(self) -> Any:
        import z3

        return z3

    def _bin(self, other: Any, fn: Callable[[Any, Any], Any], low: int | None = None) -> Any:
        if not isinstance(other, SymInt | int) or isinstance(other, bool):
            return NotImplemented
        return SymInt(fn(self.term, SymInt.lift(self._z3(), other)), low)

    def _rbin(self, other: Any, fn: Callable[[Any, Any], Any]) -> Any:
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return SymInt(fn(self._z3().IntVal(other), self.term))

    def __add__(self, o: Any) -> Any:
        return self._bin(o, lambda a, b: a + b)

    def __radd__(self, o: Any) -> Any:
        return self._rbin(o, lambda a, b: a + b)

    def __sub__(self, o: Any) -> Any:
        return self._bin(o, lambda a, b: a - b)

    def __rsub__(self, o: Any) -> Any:
        return self._rbin(o, lambda a, b: a - b)

    def __mul__(self, o: Any) -> Any:
        other_low = o if isinstance(o, int) else getattr(o, "low", None)
        positive = (self.low or 0) >= 1 and (other_low or 0) >= 1
        return self._bin(o, lambda a, b: a * b, 1 if positive else None)

    def __rmul__(self, o: Any) -> Any:
        return self._rbin(o, lambda a, b: a * b)

    def __floordiv__(self, o: Any) -> Any:
        return self._bin(o, lambda a, b: a / b)  # z3's integer division floors for b > 0

    def __rfloordiv__(self, o: Any) -> Any:
        return self._rbin(o, lambda a, b: a / b)

    def __mod__(self, o: Any) -> Any:
        return self._bin(o, lambda a, b: a % b)

    def __rmod__(self, o: Any) -> Any:
        return self._rbin(o, lambda a, b: a % b)

    def __neg__(self) -> Any:
        return SymInt(-self.term)

    def _cmp(self, other: Any, fn: Callable[[Any, Any], Any], below: bool) -> Any:
        if isinstance(other, SymInt | int) and not isinstance(other, bool):
            if isinstance(other, int) and self.low is not None and other < self.low:
                return below  # settled by the bound: a dim (>= 1) == -1 never holds
            return SymBool(fn(self.term, SymInt.lift(self._z3(), other)))
        return NotImplemented

    def __eq__(self, o: object) -> Any:
        return self._cmp(o, lambda a, b: a == b, False)

    def __ne__(self, o: object) -> Any:
        return self._cmp(o, lambda a, b: a != b, True)

    def __lt__(self, o: Any) -> Any:
        return self._cmp(o, lambda a, b: a < b, False)

    def __le__(self, o: Any) -> Any:
        return self._cmp(o, lambda a, b: a <= b, False)

    def __gt__(self, o: Any) -> Any:
        return self._cmp(o, lambda a, b: a > b, True)

    def __ge__(self, o: Any) -> Any:
        return self._cmp(o, lambda a, b: a >= b, True)

    def __hash__(self) -> int:
        return hash(self.term)

    def __index__(self) -> int:
        raise OutsideFragment("a guard uses a symbolic dimension as a Python index")

    def __repr__(self) -> str:
        return f"SymInt({self.term})"


def condition(z3: Any, evaluate: Callable[[], Any], what: str) -> Any:
    """The z3 condition under which `evaluate()` (a guard over symbolic dims) is true.
    A path where the guard looks up a dim that is not there does not hold (the e-graph's
    guard does not either); any other failure is outside the fragment."""
    holds: list[Any] = []
    pending: list[list[bool]] = [[]]
    runs = 0
    while pending:
        prefix = pending.pop()
        paths = _Paths(z3, prefix)
        _Paths.current, previous = paths, _Paths.current
        try:
            result = bool(evaluate())
        except IndexError:  # dim(?x, 3) of a rank-2 x
            result = False
        except OutsideFragment:
            raise
        except Exception as exc:
            raise OutsideFragment(f"{what} cannot be read over symbolic shapes ({exc})") from None
        finally:
            _Paths.current = previous
        if result:
            holds.append(z3.And(True, *paths.conditions))
        pending.extend(paths.taken[:k] + [False] for k in range(len(prefix), len(paths.taken)))
        runs += 1
        if runs > MAX_PATHS:
            raise OutsideFragment(f"{what} branches more than {MAX_PATHS} ways over the dims")
    return z3.Or(False, *holds)


__all__ = ["SymBool", "SymInt", "condition"]
