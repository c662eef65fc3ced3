"""Counterexamples of the tensor prover made concrete and run: small dims from z3's
model, elements read from its functions (or distinct numbers where the model's hide the
difference), and both sides in the reference interpreter, compared as the soundness
checker compares them (fast-math: within rounding, and not where the left side
overflowed or where float64 agrees)."""

from __future__ import annotations

from typing import Any

import numpy as np

from egraph_ir.compare import leaves, mismatch
from egraph_ir.egraph.pattern import AttrVar, Match, Pattern, PCall
from egraph_ir.errors import CompilerError
from egraph_ir.expr import Constant
from egraph_ir.types import TensorType

from ..rule import FAST_MATH, NSZ, Rule
from ..sides import evaluate_side, same_values, show
from ..smt import Encoder, numpy_dtype
from .encoder import TensorEncoder
from .guards import SymInt

SMALL = (4, 16, 64)  # bounds on the dims tried in turn for a counterexample
LARGEST = 4096  # elements of a tensor the interpreter is given at most


def dim_terms(v: Any) -> list[Any]:
    """The z3 terms of an attribute value's unknown dims (a new shape's)."""
    if isinstance(v, SymInt):
        return [v.term]
    if isinstance(v, tuple):
        return [t for x in v for t in dim_terms(x)]
    return []


def unknown_dims(enc: TensorEncoder, symbolic: dict[str, Any]) -> list[Any]:
    """Every unknown dim of a query: the variables' and the attribute values'."""
    dims = [d for ds in enc.dims.values() for d in ds]
    return dims + [t for v in symbolic.values() for t in dim_terms(v)]


def small_model(z3: Any, solver: Any, enc: TensorEncoder, symbolic: dict[str, Any]) -> Any:
    """The solver's model, with every dim at most 4 where one exists (else 16, 64:
    a blocked layout needs 16 lanes), so the example is small enough to run and read."""
    dims = unknown_dims(enc, symbolic)
    for bound in SMALL:
        solver.push()
        solver.add(*(d <= bound for d in dims))
        model = solver.model() if solver.check() == z3.sat else None
        solver.pop()
        if model is not None:
            return model
    solver.check()
    return solver.model()


def concrete(
    z3: Any,
    model: Any,
    enc: TensorEncoder,
    scalar: Encoder,
    types: dict[str, str],
    attrs: dict[str, Any],
) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """The model's tensors (elements read from its functions) and attribute values."""
    arrays = {}
    for name, dims in enc.dims.items():
        shape = tuple(model.eval(d, model_completion=True).as_long() for d in dims)
        if int(np.prod(shape, dtype=np.int64)) > LARGEST:
            return None
        arrays[name] = _elements(z3, model, enc.functions[name], shape, scalar, types[name])
    values = {k: _model_value(model, v) for k, v in attrs.items()}
    return arrays, values


def _elements(
    z3: Any, model: Any, fn: Any, shape: tuple[int, ...], scalar: Encoder, dtype: str
) -> np.ndarray:
    """A variable's elements: the model's table for its function (the points it lists,
    its default elsewhere), asking the model point by point only where the default is
    not one value."""
    out = np.empty(shape, dtype=numpy_dtype(dtype))
    table = model[fn] if shape else None
    if isinstance(table, z3.FuncInterp):
        try:
            fallback = table.else_value()
        except z3.Z3Exception:  # no default: every point is listed or any value does
            fallback = None
        if fallback is not None and not z3.is_var(fallback) and fallback.num_args() == 0:
            out[...] = scalar.to_numpy(fallback, dtype)
            for k in range(table.num_entries()):
                entry = table.entry(k)
                idx = tuple(entry.arg_value(a).as_long() for a in range(entry.num_args()))
                if all(0 <= i < d for i, d in zip(idx, shape, strict=True)):
                    out[idx] = scalar.to_numpy(entry.value(), dtype)
            return out
    for idx in np.ndindex(*shape):
        term = model.eval(fn(*[z3.IntVal(i) for i in idx]) if idx else fn(), model_completion=True)
        out[idx] = scalar.to_numpy(term, dtype)
    return out


def distinct(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Arrays of the same shapes with distinct elements (1, 2, 3 ... across them; bool
    alternating), where a model's elements happen to hide a difference."""
    out, start = {}, 1
    for name, a in arrays.items():
        values = np.arange(start, start + a.size).reshape(a.shape)
        out[name] = (values % 2 == 1) if a.dtype == np.bool_ else values.astype(a.dtype)
        start += a.size
    return out


def _model_value(model: Any, v: Any) -> Any:
    if isinstance(v, SymInt):
        return model.eval(v.term, model_completion=True).as_long()
    if isinstance(v, tuple):
        return tuple(_model_value(model, x) for x in v)
    return v


def explicit(p: Pattern, implicit: dict[int, dict[str, str]]) -> Pattern:
    """The left side with the attributes it leaves out named by the variables the
    encoder gave them (so the interpreter runs the value the solver chose)."""
    if not isinstance(p, PCall):
        return p
    args = tuple(explicit(a, implicit) for a in p.args)
    extra = tuple((k, AttrVar(v)) for k, v in implicit.get(id(p), {}).items())
    return PCall(p.op, args, p.attrs + extra)


def confirm(
    rule: Rule,
    lhs: Pattern,
    example: tuple[dict[str, np.ndarray], dict[str, Any]],
    dtype: str,
) -> str | None:
    """How the two sides differ on the example in the interpreter (None: they agree, or a
    guard that reads values does not hold there)."""
    arrays, values = example
    match = Match({n: TensorType(a.shape, str(a.dtype)) for n, a in arrays.items()}, values, arrays)
    try:
        if not all(g(match) for g in rule.guards):
            return None
    except (CompilerError, ValueError, KeyError, IndexError, TypeError):
        return None
    consts = {n: Constant(a) for n, a in arrays.items()}
    try:
        left = evaluate_side(lhs, consts, values, dtype)
    except (CompilerError, ValueError, KeyError):
        return None  # not a binding where the rule fires
    try:
        right = evaluate_side(rule.rhs, consts, values, dtype)
    except (CompilerError, ValueError, KeyError) as exc:
        return f"the right side is ill-typed there ({exc})"
    if FAST_MATH in rule.tags:
        return _beyond_rounding(rule, lhs, arrays, values, dtype, left, right)
    if same_values(left, right, NSZ in rule.tags):
        return None
    return _difference(left, right)


def _beyond_rounding(
    rule: Rule,
    lhs: Pattern,
    arrays: dict[str, np.ndarray],
    values: dict[str, Any],
    dtype: str,
    left: np.ndarray,
    right: np.ndarray,
) -> str | None:
    """A fast-math rule claims real-number equality: a difference counts only beyond the
    dtype's tolerance, where the left side is finite and where float64 differs too."""
    if mismatch(left, right) is None:
        return None
    if any(np.asarray(x).dtype.kind == "f" and np.isinf(x).any() for x in leaves(left)):
        return None
    if dtype in ("float16", "float32"):
        wide = {
            n: Constant(a.astype(np.float64) if a.dtype.kind == "f" else a)
            for n, a in arrays.items()
        }
        try:
            agree = mismatch(
                evaluate_side(lhs, wide, values, "float64"),
                evaluate_side(rule.rhs, wide, values, "float64"),
            )
        except (CompilerError, ValueError, KeyError):
            agree = "differs"
        if agree is None:
            return None
    return _difference(left, right)


def _difference(left: np.ndarray, right: np.ndarray) -> str:
    """Where two results differ: their shapes, or the first index where they do."""
    if left.shape != right.shape:
        return f"left gives shape {left.shape}, right gives shape {right.shape}"
    if not left.shape:
        return f"left gives {show(left)}, right gives {show(right)}"
    for idx in np.ndindex(*left.shape):
        if not same_values(left[idx], right[idx], nsz=False):
            return f"at index {idx} left gives {show(left[idx])}, right gives {show(right[idx])}"
    return f"left gives {show(left)}, right gives {show(right)}"


__all__ = [
    "concrete",
    "confirm",
    "dim_terms",
    "distinct",
    "explicit",
    "small_model",
    "unknown_dims",
]
