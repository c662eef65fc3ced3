"""A rule's two sides run in the reference interpreter on a binding: how both provers
confirm a counterexample before they call a rule refuted."""

from __future__ import annotations

from typing import Any

import numpy as np

from egraph_ir.compare import leaves
from egraph_ir.egraph.pattern import Pattern
from egraph_ir.expr import Constant, Function
from egraph_ir.infer import infer_type
from egraph_ir.interp import interpret
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType

from .bindings import instantiate


def evaluate_side(
    p: Pattern, consts: dict[str, Constant], attrs: dict[str, Any], dtype: str
) -> Any:
    """One side over these constants, as the e-graph builds it (literals take `dtype`)."""
    expr = instantiate(p, consts, attrs, TensorType((), dtype))
    mod = infer_type(IRModule.from_expr(Function((), expr)))
    (value,) = leaves(interpret(mod))
    return np.asarray(value)


def same_values(a: np.ndarray, b: np.ndarray, nsz: bool) -> bool:
    """Equal as the compiler promises: same shape and dtype, NaN meets NaN, zeros by sign
    unless `nsz`."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f" and str(a.dtype) != "bfloat16":
        return bool(np.array_equal(a, b))
    x, y = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(x) & np.isnan(y)
    same = (x == y) & (nsz | (np.signbit(x) == np.signbit(y)))
    return bool(np.all(both_nan | same))


def show(value: np.ndarray) -> str:
    """A 0-d result as a plain number (-0.0, nan, 7), with its dtype; else the array."""
    if value.shape:
        return np.array2string(value, threshold=20, separator=", ")
    number = value.item() if value.dtype.kind in "biu" else float(value)
    return f"{number!r} ({value.dtype})"


__all__ = ["evaluate_side", "same_values", "show"]
