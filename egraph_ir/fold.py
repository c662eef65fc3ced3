"""Evaluate what is already known: op calls whose arguments are all constants.

Shared by the FoldConstant pass and the ONNX importer (which folds shape arithmetic while
it reads a model). Uses the ops' numpy references, so folding means what interpreting means.
"""

from __future__ import annotations

import numpy as np

from .expr import Call, Constant, Expr, Tuple, TupleGetItem
from .registry import Op


def constant_value(call: Call) -> np.ndarray | tuple[np.ndarray, ...] | None:
    """The value of an op call of constants; None for anything else, or when evaluation
    fails (the error then surfaces where the program runs)."""
    if not isinstance(call.op, Op) or not all(isinstance(a, Constant) for a in call.args):
        return None
    if call.op.annotation or not call.op.foldable:  # a marker stays where it was put, and
        return None  # a dequantized weight stays an integer tensor for the quantised rules
    try:
        out = call.op.evaluate([a.data for a in call.args], call.attrs)  # type: ignore[attr-defined]
    except Exception:
        return None
    return tuple(np.asarray(v) for v in out) if isinstance(out, tuple) else np.asarray(out)


def as_constant(value: np.ndarray | tuple[np.ndarray, ...]) -> Expr:
    if isinstance(value, tuple):
        return Tuple(tuple(Constant(v) for v in value))
    return Constant(value)


def fold(e: Expr) -> Expr:
    """e itself, or the constant it evaluates to: a call of constants, or a field of a tuple
    of constants (a Tuple node or a tuple-valued call)."""
    if isinstance(e, Call):
        value = constant_value(e)
        return e if value is None else as_constant(value)
    if isinstance(e, TupleGetItem):
        t = e.tuple_value
        if isinstance(t, Tuple) and isinstance(t.fields[e.index], Constant):
            return t.fields[e.index]
        if isinstance(t, Call):
            fields = constant_value(t)
            if isinstance(fields, tuple):
                return Constant(fields[e.index])
    return e
