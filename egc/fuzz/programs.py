"""Broad random programs for differential fuzzing, and a shrinker for failing ones.

A program is grown one op at a time: any registered op (annotations aside), its argument
types and attributes drawn by the soundness checker's structure drawer (so every attribute
form the registry accepts can appear), its arguments taken from earlier values of the same
type where there are some (that makes DAGs) and fresh inputs otherwise. Fresh inputs
sometimes get an axis of extent 1 or 0. Input values mix ordinary numbers with each
dtype's extremes: signed zeros, infinities, NaN, the largest finite values, integer
minimum and maximum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

import rules
from egraph_ir import op as ops
from egraph_ir.compare import leaves, mismatch, tolerance
from egraph_ir.egraph import PCall, PVar
from egraph_ir.errors import CompilerError
from egraph_ir.expr import Call, Expr, Function, TupleGetItem, Var
from egraph_ir.infer import infer_type
from egraph_ir.interp import interpret
from egraph_ir.module import IRModule
from egraph_ir.registry import REGISTRY
from egraph_ir.types import TensorType, TupleType, tensor_types
from egraph_ir.visitor import post_order, rebuild
from rules.bindings import Structure, draw_structure

SKIPPED_OPS = ("compiler_begin", "compiler_end")
# dtypes a program may be steered towards: where the last fuzzing round found mismatches
# (storage-only floats, float16 accumulation, bool arithmetic)
FOCUS_DTYPES = ("float16", "bfloat16", "bool")
FOCUS_SHARE = 0.4  # of programs
DEGENERATE_SHARE = 0.3  # of parameters: one axis of extent 1 or 0


@dataclass
class Case:
    mod: IRModule
    inputs: dict[str, np.ndarray]


_PROBES: dict[str, tuple[rules.Rule, PCall]] = {}


def _probe(name: str) -> tuple[rules.Rule, PCall]:
    """A one-op rule whose left side the structure drawer can type."""
    if name not in _PROBES:
        o = ops.get(name)
        arity = 2 if o.variadic else len(o.inputs)
        args = ", ".join(f"?a{i}" for i in range(arity))
        rule = next(iter(rules.parse(f"rule probe [t]\n    {name}({args}) => ?a0")))
        _PROBES[name] = (rule, PCall(name, tuple(PVar(f"a{i}") for i in range(arity))))
    return _PROBES[name]


def fuzzable_ops() -> list[str]:
    return sorted(n for n in REGISTRY if n not in SKIPPED_OPS and REGISTRY[n].inputs)


ORDER_SENSITIVE = {  # ops whose result depends on the order of a sum or a product
    "sum", "mean", "prod", "max", "min", "argmax", "variance", "std", "logsumexp",
    "dense", "matmul", "batch_matmul", "conv2d", "avg_pool2d", "global_avg_pool2d",
    "softmax", "log_softmax", "batch_norm", "layer_norm", "instance_norm", "group_norm",
    "l2_normalize",
}  # fmt: skip


def order_sensitive(mod: IRModule) -> bool:
    """Does the program sum or multiply many values (reassociated in compiled code)?"""
    return any(
        isinstance(n, Call) and getattr(n.op, "name", "") in ORDER_SENSITIVE
        for n in post_order(mod["main"].body)
    )


def random_program(
    rng: np.random.Generator, max_ops: int = 8, extremes: bool = True
) -> Case | None:
    """A random program of 1..max_ops ops over every registered op, with inputs."""
    names = fuzzable_ops()
    values: list[tuple[Expr, TensorType]] = []
    params: list[Var] = []
    focus = str(rng.choice(FOCUS_DTYPES)) if rng.random() < FOCUS_SHARE else None
    for _ in range(int(rng.integers(1, max_ops + 1))):
        name = str(rng.choice(names))
        rule, pattern = _probe(name)
        s = _structure(rule, pattern, rng, focus)
        if s is None:
            continue
        attrs = {key.split(".")[-1]: v for (path, key), v in s.wildcards.items() if path == 0}
        args: list[Expr] = []
        for i in range(len(pattern.args)):
            t = s.types[f"a{i}"]
            same = [e for e, vt in values if vt == t]
            if same and rng.random() < 0.8:
                args.append(same[int(rng.integers(len(same)))])
            else:
                params.append(Var(f"x{len(params)}", _odd_shape(t, rng)))
                args.append(params[-1])
        try:
            call: Expr = ops.call(name, *args, **attrs)
            result = infer_type(call).checked_type
        except (CompilerError, ValueError, TypeError):
            continue  # an odd shape (or a drawn value) did not fit this op: try another
        t = result  # type: ignore[assignment]
        if isinstance(t, TupleType):
            k = int(rng.integers(len(t.fields)))
            call = TupleGetItem(call, k)
            t = t.fields[k]
        if isinstance(t, TensorType) and t.size <= 1 << 14:
            values.append((call, t))
    if not values:
        return None
    used = {p for e, _ in values for p in post_order(e) if isinstance(p, Var)}
    params = [p for p in params if p in used]
    body = values[-1][0]
    mod = IRModule({"main": Function(tuple(p for p in params if _reaches(p, body)), body)})
    try:
        infer_type(mod)
    except CompilerError:
        return None
    fn = mod["main"]
    inputs = {p.name_hint: values_for(p.checked_type, rng, extremes) for p in fn.params}  # type: ignore[arg-type]
    return Case(mod, inputs)


def _structure(
    rule: rules.Rule, pattern: PCall, rng: np.random.Generator, focus: str | None
) -> Structure | None:
    """A structure for the op in the focus dtype, or any when the op takes none."""
    s = draw_structure(rule, pattern, rng, tries=20, dtype=focus) if focus else None
    return s or draw_structure(rule, pattern, rng, tries=20)


def _reaches(p: Var, body: Expr) -> bool:
    return any(n is p for n in post_order(body))


def _odd_shape(t: TensorType, rng: np.random.Generator) -> TensorType:
    """t, or t with one axis of extent 1 or 0 (which the op may or may not accept)."""
    if not t.shape or rng.random() > DEGENERATE_SHARE:
        return t
    shape = list(t.shape)
    shape[int(rng.integers(len(shape)))] = 0 if rng.random() < 0.25 else 1
    return TensorType(tuple(shape), t.dtype)


def values_for(t: TensorType, rng: np.random.Generator, extremes: bool = True) -> np.ndarray:
    """Values of type t: mostly ordinary, some special (signed zeros, one, integer limits;
    with `extremes` also infinities, NaN and the largest finite floats)."""
    dtype = np.dtype(t.dtype)
    size = int(np.prod(t.shape, dtype=np.int64))
    if dtype.kind == "b":
        return rng.random(t.shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        special: list[float] = [info.min, info.max, 0, 1, -1 if dtype.kind == "i" else 2]
        ordinary = rng.integers(max(info.min, -20), min(info.max, 20) + 1, size)
    else:
        finfo = ml_dtypes.finfo(dtype)  # numpy's finfo knows no bfloat16
        special = [0.0, -0.0, 1.0, -1.0, float(finfo.tiny)]
        if extremes:
            special += [np.inf, -np.inf, np.nan, float(finfo.max), -float(finfo.max)]
        ordinary = rng.standard_normal(size) * 3
    values = np.asarray(ordinary).astype(dtype)
    mask = rng.random(size) < 0.1
    if mask.any():
        values[mask] = np.asarray(rng.choice(np.array(special, dtype=dtype), int(mask.sum())))
    return values.reshape(t.shape)


# ---------------------------------------------------------------- differential check
Failure = str | None


def differential(case: Case, build: Callable[[IRModule], Callable[..., object]]) -> Failure:
    """None when the compiled program agrees with the interpreter (dtype tolerances, NaN
    meets NaN), else what differs. Both sides must fail the same way on bad input."""
    try:
        expected = interpret(case.mod, **case.inputs)
    except CompilerError:
        return None  # the reference refuses these values (e.g. an index out of range)
    run = build(case.mod)
    actual = run(**case.inputs)
    actual = _as_tuples(actual)
    problem = mismatch(actual, expected)
    if problem is not None and _within(actual, expected, coarsest_float(case.mod)):
        problem = None  # e.g. float32 math cast to float64: float32's tolerance applies
    if problem is not None and reinterprets_computed_floats(case.mod):
        return _shapes_differ(actual, expected)  # bits of a value only promised within tolerance
    if problem is None or not _has_extremes(case):
        return problem
    if order_sensitive(
        case.mod
    ):  # documented: infinities and huge values make sums order-dependent
        return _shapes_differ(actual, expected)
    return _beyond_fma(actual, expected, problem)


def _as_tuples(value: object) -> object:
    """A run's result with lists (as an executable may return them) as nested tuples."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(v) for v in value)
    return value


def reinterprets_computed_floats(mod: IRModule) -> bool:
    """Does a bitcast read the bits of a computed float (gelu's result, say)? Float math is
    promised within the dtype's tolerance, not bit for bit, so such bits may differ."""
    return any(
        isinstance(n, Call)
        and getattr(n.op, "name", "") == "bitcast"
        and isinstance(n.args[0], Call | TupleGetItem)
        and any(
            t.dtype.startswith(("float", "bfloat")) for t in tensor_types(n.args[0].checked_type)
        )
        for n in post_order(mod["main"].body)
    )


def value_dtypes(mod: IRModule) -> set[str]:
    """The dtypes of every value main computes or reads."""
    return {
        t.dtype
        for n in post_order(mod["main"].body)
        if n.has_type
        for t in tensor_types(n.checked_type)
    }


def coarsest_float(mod: IRModule) -> str | None:
    """The least precise float dtype any value of the program has."""
    found = value_dtypes(mod)
    return next((d for d in ("float16", "float32", "float64") if d in found), None)


def _within(actual: object, expected: object, dtype: str | None) -> bool:
    if dtype is None:
        return False
    rtol, atol = tolerance(dtype)
    a, e = leaves(actual), leaves(expected)
    for x, y in zip(a, e, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.dtype.kind != "f" or not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
            return False
    return True


def _has_extremes(case: Case) -> bool:
    for v in case.inputs.values():
        if v.dtype.kind == "f" and v.size:
            big = float(np.finfo(v.dtype).max) / 16
            if not np.isfinite(v).all() or np.abs(v).max() > big:
                return True
    return False


def _shapes_differ(actual: object, expected: object) -> Failure:
    a, e = leaves(actual), leaves(expected)
    for x, y in zip(a, e, strict=False):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)}"
    return None if len(a) == len(e) else "tuple arity differs"


def _beyond_fma(actual: object, expected: object, problem: str) -> Failure:
    """The mismatch, unless every differing element is one side overflowing where the
    other stays finite within 16x of the largest value (a fused multiply-add skips the
    rounding of its product: documented in the README)."""
    a, e = leaves(actual), leaves(expected)
    for x, y in zip(a, e, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind != "f" or x.shape != y.shape:
            return problem
        big = float(np.finfo(x.dtype).max) / 16
        differ = ~((x == y) | (np.isnan(x) & np.isnan(y)))
        near_overflow = (np.isinf(x) & (np.abs(y) > big)) | (np.isinf(y) & (np.abs(x) > big))
        rtol, atol = 1e-2, 1e-2
        close = np.isclose(x, y, rtol=rtol, atol=atol)
        if (differ & ~near_overflow & ~close).any():
            return problem
    return None


def shrink(case: Case, fails: Callable[[Case], bool], budget: int = 200) -> Case:
    """A smaller case that still fails: the output replaced by an earlier value, or a call
    replaced by one of its arguments of the same type, while the failure stays."""
    current = case
    for _ in range(budget):
        smaller = next((c for c in _candidates(current) if _safe(fails, c)), None)
        if smaller is None:
            return current
        current = smaller
    return current


def _safe(fails: Callable[[Case], bool], c: Case) -> bool:
    try:
        return fails(c)
    except Exception:
        return False


def _candidates(case: Case):
    fn = case.mod["main"]
    nodes = [n for n in post_order(fn.body, into_functions=False) if isinstance(n, Call)]
    for n in nodes[:-1]:  # an earlier value as the output
        if isinstance(n.checked_type, TensorType):
            yield _with_body(case, n)
    for n in reversed(nodes):  # a call bypassed by an argument of its own type
        for a in n.args:
            if a.checked_type == n.checked_type:
                yield _with_body(case, _replace(fn.body, n, a))
                break


def _replace(body: Expr, old: Expr, new: Expr) -> Expr:
    memo: dict[Expr, Expr] = {old: new}
    for n in post_order(body):
        if n not in memo:
            memo[n] = rebuild(n, memo)  # leaves (variables, constants) come back as they are
    return memo[body]


def _with_body(case: Case, body: Expr) -> Case:
    used = {n for n in post_order(body) if isinstance(n, Var)}
    fn = case.mod["main"]
    params = tuple(p for p in fn.params if p in used)
    mod = infer_type(IRModule({"main": Function(params, body)}))
    return Case(mod, {p.name_hint: case.inputs[p.name_hint] for p in params})
