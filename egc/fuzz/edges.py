"""A second program generator for differential fuzzing, with another op mix than the
first: it builds programs out of the shapes that generator rarely reaches.

egc/fuzz/programs.py draws any registered op and lets the soundness checker type it, so
most of its programs are one op family over ordinary tensors. This one grows a program from moves
that each make one known-hard situation: 0-d parameters, scalars expanded and broadcast
against tensors, chains of casts through narrow types (int8, uint8, bool, float16,
bfloat16), divisions by zero whose infinities and NaNs feed products and reductions,
argmax over values with ties, and outputs that are nested tuples of mixed dtypes. Input
values come from small sets (so ties and zeros are common), not from a normal draw.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from egraph_ir import op as ops
from egraph_ir.errors import CompilerError
from egraph_ir.expr import Expr, Function, Tuple, Var
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order

from .programs import Case

DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool")
HALF_DTYPES = ("float16", "bfloat16")
HALF_SHARE = 0.3  # of programs: most values in float16 or bfloat16
NARROW = ("int8", "uint8", "bool", "float16", "bfloat16", "int32")
FLOAT_UNARY = ("abs", "negative", "sqrt", "exp", "log", "round", "floor", "sign", "tanh", "erf")
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "mod")
COMPARE = ("equal", "less", "greater_equal", "not_equal")
REDUCE = ("sum", "prod", "max", "min", "mean")
SMALL_VALUES = (0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 3.0, -2.0)  # ties and zeros are common

Value = tuple[Expr, TensorType]


class _Program:
    """The values grown so far and the parameters they read."""

    def __init__(self, rng: np.random.Generator, dtype: str) -> None:
        self.rng = rng
        self.dtype = dtype  # the program's main dtype
        self.values: list[Value] = []
        self.params: list[Var] = []

    def param(self, shape: tuple[int, ...], dtype: str | None = None) -> Value:
        t = TensorType(shape, dtype or self.dtype)
        p = Var(f"x{len(self.params)}", t)
        self.params.append(p)
        return p, t

    def shape(self) -> tuple[int, ...]:
        rank = int(self.rng.integers(0, 4))
        return tuple(int(self.rng.integers(1, 5)) for _ in range(rank))

    def pick(self, accept: Callable[[TensorType], bool] = lambda t: True) -> Value:
        """An earlier value that `accept`s, or a new parameter of the program's dtype."""
        fits = [v for v in self.values if accept(v[1])]
        if fits and self.rng.random() < 0.75:
            return fits[int(self.rng.integers(len(fits)))]
        return self.param(self.shape())

    def add(self, e: Expr) -> Value:
        """Type e; keep it as a value (a type error propagates to the move)."""
        t = infer_type(e).checked_type
        assert isinstance(t, TensorType)
        self.values.append((e, t))
        return e, t


def _float(t: TensorType) -> bool:
    return t.dtype.startswith(("float", "bfloat"))


def _scalar(p: _Program) -> None:
    """A 0-d parameter, used straight away by an elementwise op with a tensor."""
    s, scalar_type = p.param((), str(p.rng.choice(DTYPES)) if p.rng.random() < 0.3 else None)
    x, _ = p.pick(lambda t: t.dtype == scalar_type.dtype and t.ndim > 0)
    name = "where" if scalar_type.dtype == "bool" else str(p.rng.choice(BINARY))
    if name == "where":
        y, _ = p.pick(lambda t: t.dtype == p.dtype)
        p.add(ops.call("where", s, y, ops.call("zeros_like", y)))
    else:
        p.add(ops.call(name, *((s, x) if p.rng.random() < 0.5 else (x, s))))


def _expand_broadcast(p: _Program) -> None:
    """A scalar (or a short vector) expanded with expand_dims, then broadcast to a shape or
    against a tensor of more axes."""
    v, vt = p.pick(lambda t: t.ndim <= 1)
    k = int(p.rng.integers(1, 3))
    e, et = p.add(ops.call("expand_dims", v, axis=0, num_newaxis=k))
    target = tuple(int(p.rng.integers(1, 4)) for _ in range(et.ndim - 1)) + (et.shape[-1] or 1,)
    if vt.ndim == 0 or p.rng.random() < 0.5:
        target = target[:-1] + ((et.shape[-1] if p.rng.random() < 0.5 else 3),)
        if et.shape[-1] not in (1, target[-1]):
            target = target[:-1] + (et.shape[-1],)
        p.add(ops.call("broadcast_to", e, shape=target))
    else:
        other, _ = p.param(target, vt.dtype)
        p.add(ops.call(str(p.rng.choice(("add", "multiply", "maximum"))), e, other))


def _cast_chain(p: _Program) -> None:
    """A value cast through one to three narrow types."""
    v, _ = p.pick()
    for _ in range(int(p.rng.integers(1, 4))):
        v, _ = p.add(ops.call("cast", v, dtype=str(p.rng.choice(NARROW))))
    if p.rng.random() < 0.5:
        p.add(ops.call("cast", v, dtype=p.dtype))


def _divide_then_reduce(p: _Program) -> None:
    """x / y with zeros in y (so infinities and NaN), into a product and a reduction."""
    x, xt = p.pick(lambda t: _float(t) and t.ndim > 0)
    y, _ = p.param(xt.shape, xt.dtype)  # drawn from SMALL_VALUES: a quarter are zeros
    q, qt = p.add(ops.call("divide", x, y))
    if p.rng.random() < 0.6:
        w, _ = p.pick(lambda t: t == qt)
        q, qt = p.add(ops.call("multiply", q, w))
    axis = int(p.rng.integers(qt.ndim))
    keep = bool(p.rng.random() < 0.5)
    p.add(ops.call(str(p.rng.choice(REDUCE)), q, axis=(axis,), keepdims=keep))


def _argmax_ties(p: _Program) -> None:
    """argmax over values with ties: small-set inputs, rounded or cast values."""
    v, vt = p.pick(lambda t: t.ndim > 0 and t.dtype != "bool")
    if _float(vt) and p.rng.random() < 0.5:
        v, vt = p.add(ops.call("round", v))
    axis = int(p.rng.integers(vt.ndim)) if p.rng.random() < 0.8 else None
    p.add(ops.call("argmax", v, axis=axis, keepdims=bool(p.rng.random() < 0.5)))


def _elementwise(p: _Program) -> None:
    """A unary float op, a comparison into where, or a binary op with broadcasting."""
    x, xt = p.pick()
    roll = p.rng.random()
    if roll < 0.3 and _float(xt):
        p.add(ops.call(str(p.rng.choice(FLOAT_UNARY)), x))
    elif roll < 0.55 and xt.dtype != "bool":
        y, _ = p.pick(lambda t: t.dtype == xt.dtype)
        cond, _ = p.add(ops.call(str(p.rng.choice(COMPARE)), x, y))
        p.add(ops.call("where", cond, x, y))
    else:
        y, _ = p.pick(lambda t: t.dtype == xt.dtype)
        p.add(ops.call(str(p.rng.choice(BINARY)), x, y))


MOVES = (_scalar, _expand_broadcast, _cast_chain, _divide_then_reduce, _argmax_ties, _elementwise)


def edge_program(rng: np.random.Generator, max_moves: int = 6) -> Case | None:
    """A random program of 1..max_moves moves whose output is one value or a nested tuple
    of values of mixed dtypes, with inputs; None when no move fit."""
    half = rng.random() < HALF_SHARE
    dtype = str(rng.choice(HALF_DTYPES)) if half else str(rng.choice(DTYPES[:7]))
    p = _Program(rng, dtype)
    for _ in range(int(rng.integers(1, max_moves + 1))):
        move = MOVES[int(rng.integers(len(MOVES)))]
        kept = len(p.values)
        try:
            move(p)
        except (CompilerError, ValueError, TypeError, AssertionError):
            del p.values[kept:]  # this move did not type here: the program goes on without it
    if not p.values:
        return None
    body = _output(p)
    used = {n for n in post_order(body) if isinstance(n, Var)}
    params = tuple(v for v in p.params if v in used)
    try:
        mod = infer_type(IRModule({"main": Function(params, body)}))
    except CompilerError:
        return None
    return Case(mod, {v.name_hint: _values(v.checked_type, rng) for v in params})  # type: ignore[arg-type]


def _output(p: _Program) -> Expr:
    """The last value, or a nested tuple of the last few (mixed dtypes where there are)."""
    last = p.values[-1][0]
    if len(p.values) < 3 or p.rng.random() < 0.4:
        return last
    picks = [p.values[int(i)][0] for i in p.rng.choice(len(p.values) - 1, 2, replace=False)]
    inner = Tuple((picks[0], last)) if p.rng.random() < 0.5 else Tuple((last,))
    return Tuple((picks[1], inner))


def _values(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Inputs from a small set (zeros, signed zeros, ties), sometimes an infinity or NaN."""
    dtype = np.dtype(t.dtype)
    if dtype.kind == "b":
        return rng.random(t.shape) < 0.5
    choices = list(SMALL_VALUES)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        ints = np.array([c for c in (0, 1, 2, 3, info.max, info.min, -1, -2) if info.min <= c])
        return np.asarray(rng.choice(ints.astype(dtype), t.shape))
    if rng.random() < 0.3:
        choices += [np.inf, -np.inf, np.nan]
    return np.asarray(rng.choice(np.array(choices, dtype=np.float64), t.shape)).astype(dtype)
