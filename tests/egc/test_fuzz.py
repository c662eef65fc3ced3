"""A fast slice of the fuzzers in egc.fuzz (the long run is `make fuzz SECONDS=600`):
fixed seeds, so a failure here reproduces with `run_case(kind, seed)`."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import egraph_ir as ir
from egc.fuzz.edges import edge_program
from egc.fuzz.programs import random_program
from egc.fuzz.runner import run_case

pytest.importorskip("onnx")


@pytest.mark.parametrize("kind", ["program", "edges", "ir-text", "rules", "onnx", "artifact"])
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


def test_the_second_generator_makes_the_programs_it_is_for() -> None:
    """0-d parameters, expanded and broadcast scalars, cast chains through narrow types,
    divisions feeding reductions, argmax, nested tuples of mixed dtypes, half floats."""
    ops: set[str] = set()
    seen: set[str] = set()
    for seed in range(150):
        case = edge_program(np.random.default_rng(seed))
        if case is None:
            continue
        body = case.mod["main"].body
        calls = [n for n in ir.post_order(body) if isinstance(n, ir.Call)]
        ops.update(n.op.name for n in calls)
        if any(v.ndim == 0 for v in case.inputs.values()):
            seen.add("0-d parameter")
        if isinstance(body, ir.Tuple) and any(isinstance(f, ir.Tuple) for f in body.fields):
            seen.add("nested tuple")
        casts = [n for n in calls if n.op.name == "cast" and n.args[0] in calls]
        if any(n.args[0].op.name == "cast" for n in casts):
            seen.add("cast chain")
        if {str(v.dtype) for v in case.inputs.values()} & {"float16", "bfloat16"}:
            seen.add("half floats")
    assert {"expand_dims", "broadcast_to", "argmax", "divide", "cast"} <= ops, sorted(ops)
    assert {"sum", "prod", "max", "min", "mean"} & ops, sorted(ops)
    assert seen == {"0-d parameter", "nested tuple", "cast chain", "half floats"}, seen
