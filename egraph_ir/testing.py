"""Hypothesis strategies for random well-typed programs, and assertions for tests.

`programs()` draws a dataflow function over the op registry whose shapes are consistent by
construction (broadcasting, reductions, reshape, matmul/dense, conv2d, pooling, concatenation,
split), together with input arrays. Constants come from a seeded numpy generator so that
hypothesis shrinks the program's structure and its inputs, not megabytes of weights.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from . import op
from .compare import tolerance  # re-exported: part of testing's API
from .dims import Dim, evaluate, typical
from .errors import TypeInferenceError
from .expr import Constant, Expr, Function, TupleGetItem, Var, var
from .infer import infer_type
from .interp import interpret
from .module import IRModule
from .structural import structural_equal
from .types import TensorType


@dataclass(frozen=True)
class ProgramCase:
    """A random program and inputs for it."""

    mod: IRModule
    inputs: dict[str, np.ndarray]

    def __repr__(self) -> str:  # shown by hypothesis on failure
        shapes = {k: (v.shape, str(v.dtype)) for k, v in self.inputs.items()}
        return f"ProgramCase(inputs={shapes})\n{self.mod.astext(show_meta=False)}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """hypothesis prints dataclasses field by field unless this exists: show the program."""
        printer.text(repr(self))


# ---------------------------------------------------------------- strategies
def shapes(min_rank: int = 0, max_rank: int = 4, max_dim: int = 5) -> st.SearchStrategy:
    return st.lists(st.integers(1, max_dim), min_size=min_rank, max_size=max_rank).map(tuple)


def tensors(
    shape: Sequence[int],
    dtype: str = "float32",
    low: float = -4.0,
    high: float = 4.0,
    elements: st.SearchStrategy | None = None,
) -> st.SearchStrategy:
    """Arrays of a shape and dtype with values in [low, high] (or from `elements`)."""
    if elements is None:
        if dtype.startswith("float"):
            width: Any = np.dtype(dtype).itemsize * 8
            elements = st.floats(low, high, width=width, allow_nan=False)
        elif dtype == "bool":
            elements = st.booleans()
        else:
            elements = st.integers(int(low), int(high))
    return hnp.arrays(dtype, tuple(shape), elements=elements)


Values = list[tuple[Expr, TensorType]]
Gen = Callable[[Callable[..., Any], Values, np.random.Generator], Expr | None]


def _pick(draw, values: Values, pred=lambda t: True) -> tuple[Expr, TensorType] | None:
    """A value that fits pred: half the time the most recent one, so programs grow deep."""
    ok = [v for v in reversed(values) if pred(v[1])]
    if not ok:
        return None
    return ok[draw(st.one_of(st.just(0), st.integers(0, len(ok) - 1)))]


def _must_pick(draw, values: Values, pred=lambda t: True) -> tuple[Expr, TensorType]:
    picked = _pick(draw, values, pred)
    assert picked is not None
    return picked


def _const(rng: np.random.Generator, shape, dtype) -> Constant:
    return Constant((rng.standard_normal(shape)).astype(dtype))


UNARY = (
    "negative",
    "abs",
    "exp",
    "tanh",
    "sigmoid",
    "relu",
    "sqrt",
    "log",
    "rsqrt",
    "erf",
    "floor",
    "sin",
    "cos",
    "sign",
    "round",
    "ceil",
)
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")
REDUCE = ("sum", "mean", "max", "min", "prod")


def _unary(draw, values, rng):
    x, _ = _must_pick(draw, values)
    name = draw(st.sampled_from((*UNARY, "leaky_relu", "gelu", "clip")))
    if name == "clip":
        return op.clip(x, -1.0, 1.5)
    if name == "gelu":
        return op.gelu(x, approximate=draw(st.sampled_from(("none", "tanh"))))
    return op.call(name, x)


def _binary(draw, values, rng):
    x, t = _must_pick(draw, values)
    name = draw(st.sampled_from(BINARY))
    choice = draw(st.integers(0, 2))
    if choice == 0:  # another value whose shape broadcasts
        other = _pick(
            draw, values, lambda u: _broadcastable(t.shape, u.shape) and u.dtype == t.dtype
        )
        y = other[0] if other else x
    elif choice == 1:  # a constant with some axes squashed to 1 and maybe fewer leading axes
        keep = draw(st.integers(0, t.ndim))
        shape = tuple(d if draw(st.booleans()) else 1 for d in t.shape[t.ndim - keep :])
        y = _const(rng, shape, t.dtype)
    else:
        y = Constant(np.asarray(draw(st.sampled_from((0.0, 1.0, 0.5, 2.0, -1.0))), t.dtype))
    return op.call(name, *((y, x) if draw(st.booleans()) else (x, y)))


def _broadcastable(a, b) -> bool:
    return all(p == q or p == 1 or q == 1 for p, q in zip(reversed(a), reversed(b), strict=False))


def _reduce(draw, values, rng):
    picked = _pick(draw, values, lambda u: u.ndim >= 1)
    if picked is None:
        return None
    x, t = picked
    axes = draw(
        st.lists(st.integers(-t.ndim, t.ndim - 1), max_size=t.ndim, unique_by=lambda a: a % t.ndim)
    )
    axis = tuple(axes) if axes else None
    name = draw(st.sampled_from((*REDUCE, "argmax", "softmax", "log_softmax")))
    keepdims = draw(st.booleans())
    if name == "argmax":
        return None  # int64 result: kept out of float programs
    if name in ("softmax", "log_softmax"):
        return op.call(name, x, axis=draw(st.integers(-t.ndim, t.ndim - 1)))
    return op.call(name, x, axis=axis, keepdims=keepdims)


def _layout(draw, values, rng):
    x, t = _must_pick(draw, values)
    kind = draw(
        st.sampled_from(
            (
                "reshape",
                "transpose",
                "expand_dims",
                "squeeze",
                "flatten",
                "slice",
                "pad",
                "broadcast_to",
            )
        )
    )
    if kind == "reshape":
        dims = list(t.shape)
        draw(st.randoms()).shuffle(dims)
        if len(dims) >= 2 and draw(st.booleans()):
            dims = [dims[0] * dims[1], *dims[2:]]
        if dims and draw(st.booleans()):
            dims[draw(st.integers(0, len(dims) - 1))] = -1
        return op.reshape(x, newshape=tuple(dims))
    if kind == "transpose":
        perm = draw(st.permutations(range(t.ndim)))
        return op.transpose(x, axes=tuple(perm))
    if kind == "expand_dims":
        return op.expand_dims(x, axis=draw(st.integers(-t.ndim - 1, t.ndim)))
    if kind == "squeeze":
        return op.squeeze(x)
    if kind == "flatten":
        return op.flatten(x, axis=draw(st.integers(0, t.ndim))) if t.ndim else None
    if kind == "slice" and t.ndim:
        axis = draw(st.integers(0, t.ndim - 1))
        d = t.shape[axis]
        b = draw(st.integers(-d, d - 1))
        e = draw(st.integers(-d - 1, d))
        s = draw(st.sampled_from((1, 2, -1)))
        return op.strided_slice(x, begin=(b,), end=(e,), strides=(s,), axes=(axis,))
    if kind == "pad":
        width = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in t.shape)
        return op.pad(x, pad_width=width, pad_value=draw(st.sampled_from((0.0, 1.5))))
    if kind == "broadcast_to":
        extra = draw(shapes(0, 1, 3))
        return op.broadcast_to(
            x, shape=extra + tuple(draw(st.integers(1, 3)) if d == 1 else d for d in t.shape)
        )
    return None


def _linear(draw, values, rng):
    picked = _pick(draw, values, lambda u: u.ndim >= 1)
    if picked is None:
        return None
    x, t = picked
    n = draw(st.integers(1, 5))
    if draw(st.booleans()):
        return op.dense(x, _const(rng, (n, t.shape[-1]), t.dtype))
    return op.matmul(x, _const(rng, (t.shape[-1], n), t.dtype))


def _conv_pool(draw, values, rng):
    picked = _pick(draw, values, lambda u: u.ndim == 4 and u.shape[2] >= 2 and u.shape[3] >= 2)
    if picked is None:
        return None
    x, t = picked
    kind = draw(st.sampled_from(("conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool2d")))
    pad = draw(st.sampled_from(((0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0))))
    if kind == "conv2d":
        groups = draw(st.sampled_from([g for g in (1, 2, 3) if t.shape[1] % g == 0]))
        out = groups * draw(st.integers(1, 2))
        w = _const(rng, (out, t.shape[1] // groups, 2, 2), t.dtype)
        return op.conv2d(
            x, w, padding=pad, strides=draw(st.sampled_from(((1, 1), (2, 1)))), groups=groups
        )
    if kind == "global_avg_pool2d":
        return op.global_avg_pool2d(x)
    pad = tuple(min(p, 1) for p in pad)
    fn = op.max_pool2d if kind == "max_pool2d" else op.avg_pool2d
    return fn(
        x,
        pool_size=(2, 2),
        strides=(draw(st.integers(1, 2)),) * 2,
        padding=pad,
        ceil_mode=draw(st.booleans()),
    )


def _concat_split(draw, values, rng):
    picked = _pick(draw, values, lambda u: u.ndim >= 1)
    if picked is None:
        return None
    x, t = picked
    axis = draw(st.integers(0, t.ndim - 1))
    if draw(st.booleans()):
        same = _pick(draw, values, lambda u: u == t)
        return op.concatenate([x, same[0] if same else x], axis=axis)
    d = t.shape[axis]
    if d < 2:
        return None
    parts = op.split(x, indices_or_sections=(draw(st.integers(1, d - 1)),), axis=axis)
    return TupleGetItem(parts, draw(st.integers(0, 1)))


def _where(draw, values, rng):
    x, t = _must_pick(draw, values)
    y = _must_pick(draw, values, lambda u: u == t)[0]
    cond = op.call(
        draw(st.sampled_from(("less", "greater_equal"))), x, Constant(np.asarray(0.5, t.dtype))
    )
    return op.where(cond, x, y)


GENERATORS: tuple[Gen, ...] = (
    _unary,
    _binary,
    _binary,
    _reduce,
    _layout,
    _linear,
    _conv_pool,
    _concat_split,
    _where,
)


def _add_op(
    draw: Callable[..., Any],
    values: Values,
    rng: np.random.Generator,
    refused: tuple[type[Exception], ...],
) -> None:
    """One op drawn from GENERATORS over `values`, appended when it types (a guess that
    raises one of `refused` is dropped) and holds 1 to 4,096 elements (at typical sizes
    where symbolic): empty slices end a chain."""
    gen = draw(st.sampled_from(GENERATORS))
    try:
        e = gen(draw, values, rng)
        if e is None:
            return
        t = infer_type(e).checked_type
    except refused:
        return
    if isinstance(t, TensorType) and 0 < typical(t.size) <= 4096:
        values.append((e, t))


@st.composite
def programs(
    draw,
    max_nodes: int = 12,
    max_inputs: int = 3,
    dtype: str = "float32",
    input_values: st.SearchStrategy | None = None,
) -> ProgramCase:
    """A random well-typed function of 1..max_inputs tensors and up to max_nodes ops."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_inputs = draw(st.integers(1, max_inputs))
    params: list[Var] = []
    values: Values = []
    for i in range(n_inputs):
        shape = draw(st.one_of(shapes(0, 4), shapes(4, 4, 6)))
        v = var(f"x{i}", shape=shape, dtype=dtype)
        params.append(v)
        values.append((v, TensorType(shape, dtype)))
    for _ in range(draw(st.integers(1, max_nodes))):
        _add_op(draw, values, rng, (TypeInferenceError,))
    result = values[-1][0]
    mod = IRModule({"main": Function(tuple(params), result)})
    inputs = {
        p.name_hint: draw(tensors(values[i][1].shape, dtype, elements=input_values))
        for i, p in enumerate(params)
    }
    return ProgramCase(infer_type(mod), inputs)


SIZE_NAMES = ("n", "m")


@dataclass(frozen=True)
class SymbolicCase:
    """A random program whose inputs have size variables, and sizes to run it at."""

    mod: IRModule
    sizes: list[dict[str, int]]

    def inputs(self, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
        """Random inputs of main's types at these sizes."""
        rng = np.random.default_rng(seed)
        out = {}
        for p in self.mod["main"].params:
            t = p.checked_type
            assert isinstance(t, TensorType)
            shape = tuple(evaluate(d, sizes) for d in t.shape)
            out[p.name_hint] = rng.uniform(-2, 2, shape).astype(t.dtype)
        return out

    def __repr__(self) -> str:
        return f"SymbolicCase(sizes={self.sizes})\n{self.mod.astext(show_meta=False)}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@st.composite
def symbolic_programs(draw, max_nodes: int = 8, runs: int = 2) -> SymbolicCase:
    """A random well-typed function whose inputs have the size variables n and m among
    their dimensions (the op mix of `programs`: what a guess cannot type with sizes, or
    cannot build, is drawn again), and `runs` sets of sizes (0 to 6) to run it at."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    params: list[Var] = []
    values: Values = []
    for i in range(draw(st.integers(1, 3))):
        dims = draw(st.lists(st.sampled_from((*SIZE_NAMES, 1, 3, 4)), min_size=1, max_size=3))
        if not any(isinstance(d, str) for d in dims):
            dims[0] = SIZE_NAMES[0]
        t = TensorType(tuple(dims), "float32")  # a name is a size variable
        v = var(f"x{i}", shape=t.shape, dtype="float32")
        params.append(v)
        values.append((v, t))
    wanted = len(values) + draw(st.integers(1, max_nodes))
    for _ in range(4 * max_nodes):  # guesses sizes do not fit are drawn again
        if len(values) >= wanted:
            break
        # also refused: a constant of a symbolic shape, a reshape sizes do not decide...
        _add_op(draw, values, rng, (TypeInferenceError, TypeError, ValueError))
    mod = infer_type(IRModule({"main": Function(tuple(params), values[-1][0])}))
    names = sorted({n for _, t in values[: len(params)] for d in t.shape for n in _names(d)})
    sizes = [{n: draw(st.integers(0, 6)) for n in names} for _ in range(runs)]
    return SymbolicCase(mod, sizes)


def _names(d: Any) -> set[str]:
    return d.names if isinstance(d, Dim) else set()


# ---------------------------------------------------------------- assertions
def assert_structural_equal(actual: Expr | IRModule, expected: Expr | IRModule) -> None:
    """Fail with a unified diff of the printed programs when they differ structurally."""
    if structural_equal(actual, expected):
        return
    diff = "\n".join(
        difflib.unified_diff(
            str(expected).splitlines(), str(actual).splitlines(), "expected", "actual", lineterm=""
        )
    )
    raise AssertionError(f"programs differ structurally:\n{diff}")


def assert_allclose(
    actual: Any, expected: Any, dtype: str | None = None, what: str = "output"
) -> None:
    """Compare arrays (or tuples of arrays) with the dtype's tolerance; NaNs must match."""
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), f"{what}: tuple arity"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_allclose(a, e, dtype, f"{what}[{i}]")
        return
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    rtol, atol = tolerance(dtype or str(expected.dtype))
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def assert_same_outputs(
    actual: IRModule, expected: IRModule, inputs: Mapping[str, np.ndarray]
) -> None:
    """Interpret both modules on the inputs and compare with dtype-aware tolerances."""
    assert_allclose(interpret(actual, **inputs), interpret(expected, **inputs))
