"""The inline vector math against numpy on a million points: the documented error bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

import codegen
import egraph_ir as ir
from egraph_ir import op

X = np.concatenate(
    [np.linspace(-100, 100, 400_001), np.linspace(-5, 5, 400_001), np.geomspace(1e-30, 80, 200_000)]
).astype("float32")


def compiled(name: str, values: np.ndarray) -> np.ndarray:
    x = ir.var("x", shape=values.shape)
    return codegen.build(ir.Function([x], op.call(name, x))).run(x=values)


def erf64(v: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(v.astype(np.float64))


@pytest.mark.parametrize(
    ("name", "reference", "bound", "relative"),
    [
        ("exp", lambda v: np.exp(v.astype(np.float64)), 2e-7, True),
        ("tanh", lambda v: np.tanh(v.astype(np.float64)), 3e-7, False),
        ("sigmoid", lambda v: 1 / (1 + np.exp(-v.astype(np.float64))), 2e-7, False),
        ("erf", erf64, 6e-7, False),
    ],
)
def test_error_bounds(name: str, reference, bound: float, relative: bool) -> None:
    values = X[(X > -87) & (X < 88)] if name == "exp" else X
    with np.errstate(all="ignore"):
        got = compiled(name, values).astype(np.float64)
        want = reference(values)
    err = np.abs(got - want)
    if relative:
        err = err / np.abs(want)
    assert float(np.max(err)) <= bound, (name, float(np.max(err)))


def test_log_error_bound_and_special_values() -> None:
    values = np.concatenate([np.geomspace(1e-44, 3e38, 1_000_000), [0.0, -1.0, np.inf, np.nan]])
    values = values.astype("float32")
    got = compiled("log", values)
    want = np.log(values[:-4].astype(np.float64))
    rel = np.abs(got[:-4] - want) / np.maximum(np.abs(want), 1e-30)
    assert float(np.max(np.where(np.abs(want) > 1e-3, rel, np.abs(got[:-4] - want)))) <= 2e-7
    assert got[-4] == -np.inf and np.isnan(got[-3]) and got[-2] == np.inf and np.isnan(got[-1])


def test_special_values_of_exp_tanh_sigmoid() -> None:
    values = np.array([np.inf, -np.inf, np.nan, 89.0, -89.0, 0.0], "float32")
    exp = compiled("exp", values)
    assert (
        exp[0] == np.inf and exp[1] == 0 and np.isnan(exp[2]) and exp[3] == np.inf and exp[4] == 0
    )
    tanh = compiled("tanh", values)
    assert tanh[0] == 1 and tanh[1] == -1 and np.isnan(tanh[2]) and tanh[5] == 0
    sig = compiled("sigmoid", values)
    assert sig[0] == 1 and sig[1] == 0 and np.isnan(sig[2]) and sig[5] == 0.5
