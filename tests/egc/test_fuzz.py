"""A fast slice of the fuzzers in egc.fuzz (the long run is `make fuzz SECONDS=600`):
fixed seeds, so a failure here reproduces with `run_case(kind, seed)`."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import egraph_ir as ir
from egc.fuzz.programs import random_program
from egc.fuzz.runner import run_case

pytest.importorskip("onnx")


@pytest.mark.parametrize("kind", ["program", "ir-text", "rules", "onnx", "artifact"])
def test_fuzzers_find_nothing_on_fixed_seeds(kind: str) -> None:
    count = 150 if kind == "program" else 100
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # numpy's overflow warnings on extreme values
        failures = [(seed, p) for seed in range(count) if (p := run_case(kind, seed)[0])]
    assert not failures, failures[0]


def test_the_generator_covers_many_ops_and_dtypes() -> None:
    ops: set[str] = set()
    dtypes: set[str] = set()
    rng = np.random.default_rng(0)
    for _ in range(150):
        case = random_program(rng)
        if case is None:
            continue
        body = case.mod["main"].body
        ops.update(n.op.name for n in ir.post_order(body) if isinstance(n, ir.Call))
        dtypes.update(str(v.dtype) for v in case.inputs.values())
    assert len(ops) >= 40, sorted(ops)
    assert {"float16", "float32", "int8", "bool"} <= dtypes, dtypes
