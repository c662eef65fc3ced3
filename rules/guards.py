"""The guard language of `where` lines, checked at load time and compiled to closures.

    where shape(?x) == shape(?y)        where rank(?x) == 4
    where dtype(?x) is float            where compose(?p, ?q) == identity
    where is_const(?k)                  where shape(?k) == [dim(?w, 0), 1, 1]

Functions: shape, rank, dtype, size, dim(?x, i) and is_const, value (a constant's value when
all its elements are equal, else None), min and max (a constant's smallest and largest
element, else None) take a tensor variable; compose(?p, ?q) (apply q to
p: r[i] = p[q[i]]), inverse(?p) and len take attribute values or lists; f32_product(a, b)
is the product of two numbers rounded to float32 (scales multiply so); rem(a, b) is the
remainder of a / b (`rem(dim(?x, 1), 16) == 0`: the channels split into blocks of 16),
div(a, b) the quotient rounded down and mul(a, b) the product; reshaped(?x, s) is the
shape reshape(?x, newshape=s) gives (its -1 resolved). The same calls compute a
right-hand side's attribute values (`reshape(?x, newshape=[dim(?x, 0), -1])`).
`identity` equals any identity permutation. Comparisons: == != < <= > >=; `is` tests a
dtype's kind: float, int, signed, bool, quantised (int8 or uint8), arithmetic (the dtypes
add, multiply, sum and dense compute in: not bool and not the storage-only narrow
floats and ints such as bfloat16, which only casts, data movement and the norms take).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from egraph_ir.egraph import Match
from egraph_ir.op.shape import reshape_target
from egraph_ir.registry import ShapeError
from egraph_ir.types import DTYPES, FLOAT_DTYPES, INT_DTYPES, NARROW_FLOATS, NARROW_INTS


class _Identity:
    """Equal to a permutation that maps every axis to itself."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple | list) and tuple(other) == tuple(range(len(other)))

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "identity"


IDENTITY = _Identity()
CONSTANT_NAMES: dict[str, Any] = {
    "identity": IDENTITY,
    "True": True,
    "False": False,
    "None": None,
    "true": True,
    "false": False,
}
KINDS = {
    "float": FLOAT_DTYPES,
    "int": INT_DTYPES,
    "bool": ("bool",),
    "signed": ("int8", "int16", "int32", "int64", *FLOAT_DTYPES),
    "quantised": ("int8", "uint8"),  # the 8-bit types of quantised tensors
    "arithmetic": tuple(d for d in DTYPES if d not in ("bool", *NARROW_FLOATS, *NARROW_INTS)),
}


def _all_equal_value(c: np.ndarray | None) -> float | None:
    if c is None or c.size == 0:
        return None
    flat = c.reshape(-1)
    return float(flat[0]) if bool(np.all(flat == flat[0])) else None


def _all_values(c: np.ndarray | None) -> tuple[float, ...] | None:
    """A constant's elements in order (per-channel scales), None for a non-constant."""
    return None if c is None else tuple(float(v) for v in c.reshape(-1))


def _extreme(c: np.ndarray | None, pick: Callable[..., Any]) -> float | None:
    """A constant's smallest or largest element (None for a non-constant or NaN)."""
    if c is None or c.size == 0:
        return None
    value = float(pick(c))
    return None if value != value else value


def _integral(c: np.ndarray | None) -> bool | None:
    """Whether a constant holds only whole numbers (a quantised product's shifted weights:
    its sums are exact in the direct order), None for a non-constant."""
    if c is None:
        return None
    if c.dtype.kind != "f":
        return True
    flat = c.reshape(-1)
    head = flat[:256]  # float weights fail here: the whole tensor is read only when needed
    whole = np.isfinite(head).all() and np.array_equal(head, np.trunc(head))
    return bool(whole and np.isfinite(flat).all() and np.array_equal(flat, np.trunc(flat)))


def _reshaped(shape: tuple[int, ...], newshape: Any) -> tuple[int, ...] | None:
    """The shape `reshape(x, newshape=newshape)` gives (its -1 resolved), or None."""
    try:
        return reshape_target(tuple(shape), tuple(newshape))
    except ShapeError:
        return None


def _compose(p: Any, q: Any) -> tuple[int, ...]:
    return tuple(p[i] for i in q)


def _inverse(p: Any) -> tuple[int, ...]:
    inv = [0] * len(p)
    for i, a in enumerate(p):
        inv[a] = i
    return tuple(inv)


# name -> (argument kinds: "tensor" or "value", implementation over evaluated arguments)
TENSOR_FUNCS: dict[str, Callable[..., Any]] = {
    "shape": lambda m, x: tuple(m.types[x].shape),
    "rank": lambda m, x: len(m.types[x].shape),
    "dtype": lambda m, x: m.types[x].dtype,
    "size": lambda m, x: math.prod(m.types[x].shape),  # also of symbolic dims
    "dim": lambda m, x, i: m.types[x].shape[i],
    "reshaped": lambda m, x, s: _reshaped(m.types[x].shape, s),
    "is_const": lambda m, x: x in m.constants,
    "value": lambda m, x: _all_equal_value(m.constants.get(x)),
    "values": lambda m, x: _all_values(m.constants.get(x)),
    "min": lambda m, x: _extreme(m.constants.get(x), np.min),
    "max": lambda m, x: _extreme(m.constants.get(x), np.max),
    "integral": lambda m, x: _integral(m.constants.get(x)),
}
VALUE_READERS = (
    "value",
    "values",
    "min",
    "max",
    "integral",
)  # functions that read a constant's values
TENSOR_ARITY = {
    "shape": 1, "rank": 1, "dtype": 1, "size": 1, "dim": 2, "reshaped": 2, "is_const": 1,
    "value": 1, "values": 1, "min": 1, "max": 1, "integral": 1,
}  # fmt: skip


def _f32_product(a: Any, b: Any) -> float | tuple[float, ...] | None:
    """a * b rounded to float32, as a runtime computes a product of two scales (ONNX
    Runtime's bias scale is input scale * weight scale in float32); elementwise when
    either is a tuple of values (a per-channel scale; a one-element side broadcasts);
    None if either is None."""
    if a is None or b is None:
        return None
    if isinstance(a, tuple) or isinstance(b, tuple):
        left, right = np.asarray(a, np.float32).reshape(-1), np.asarray(b, np.float32).reshape(-1)
        if left.size != right.size and 1 not in (left.size, right.size):
            return None
        return tuple(float(v) for v in left * right)
    return float(np.float32(a) * np.float32(b))


VALUE_FUNCS: dict[str, tuple[int, Callable[..., Any]]] = {
    "f32_product": (2, _f32_product),
    "compose": (2, _compose),
    "inverse": (1, _inverse),
    "len": (1, len),
    "rem": (2, lambda a, b: a % b if b else None),
    "div": (2, lambda a, b: a // b if b else None),
    "mul": (2, lambda a, b: a * b),
}
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: normalise_value(a) == normalise_value(b),
    "!=": lambda a, b: normalise_value(a) != normalise_value(b),
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def normalise_value(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


Evaluator = Callable[[Match], Any]


@dataclass(frozen=True)
class GuardExpr:
    """A compiled guard: its source text and a closure over a Match.

    Guards that pin one thing (`shape(?x) == E`, `rank(?x) == E`, `dtype(?x) == E`,
    `value(?x) == E`, `dtype(?x) is KIND`, `?p == E`) also say so in `target` (what: "shape",
    "rank", "dtype", "value", "kind" or "attr"; and the variable) and `value` (E, or the
    allowed dtypes): the soundness checker builds bindings that satisfy them directly.
    """

    text: str
    evaluate: Evaluator
    target: tuple[str, str] | None = None
    value: Evaluator | None = None
    reads_values: bool = False  # uses value/min/max: decidable only once constants are drawn

    def __call__(self, m: Match) -> bool:
        return bool(self.evaluate(m))


def all_of(guards: list[GuardExpr]) -> Callable[[Match], bool] | None:
    if not guards:
        return None
    return lambda m: all(g(m) for g in guards)
