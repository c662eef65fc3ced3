"""`codegen.measure.tune`: measure the kernel candidates of one model's anchors on this machine and
record them in the kernel database that every later compile reads (codegen/measure/choices.py).

Each anchor whose kernel is a measured choice (codegen/lower/select.py `tunable`) is built
alone — the same input type, weights and attributes — once per candidate, and timed with
the compile's thread budget. The report lists, per shape, the seconds of each candidate,
the measured best and what the shape rules would have chosen without a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from egraph_ir.expr import Call, Constant, Function, Var
from egraph_ir.measured import KernelTimes, default_path
from egraph_ir.module import IRModule
from egraph_ir.visitor import post_order

from ..build import build
from ..lower.select import CHOOSERS, tunable
from ..lower.strategy import NativeKernel
from . import choices


@dataclass(frozen=True)
class TunedKernel:
    """One anchor shape: each candidate's seconds, the fastest, the shape rules' pick."""

    key: str
    seconds: dict[str, float]
    best: str
    rule_choice: str


@dataclass
class TuneReport:
    path: Path
    kernels: list[TunedKernel]

    def rows(self) -> list[list[str]]:
        out = []
        for k in self.kernels:
            times = ", ".join(f"{c} {1e6 * s:.1f} us" for c, s in k.seconds.items())
            out.append([k.key, times, k.best, k.rule_choice])
        return out

    HEADER = ("anchor", "measured", "best", "shape rule")


def anchors(mod: IRModule) -> dict[str, tuple[Call, tuple[str, ...]]]:
    """The tunable anchors of a fused (or unfused) module, one per key."""
    found: dict[str, tuple[Call, tuple[str, ...]]] = {}
    for fn in mod.functions.values():
        for node in post_order(fn):
            if isinstance(node, Call) and (choice := tunable(node)) is not None:
                found.setdefault(choice[0], (node, choice[1]))
    return found


def _alone(anchor: Call) -> tuple[Function, dict[str, np.ndarray]]:
    """The anchor as a function of its one non-constant input, with random values."""
    x = anchor.args[0]
    t = x.checked_type
    param = Var("x", t)
    args = tuple(param if a is x else a for a in anchor.args)
    assert all(isinstance(a, Var | Constant) for a in args)
    fn = Function((param,), Call(anchor.op, args, anchor.attrs))
    rng = np.random.default_rng(0)
    value = rng.standard_normal(t.shape).astype(t.dtype)  # type: ignore[attr-defined]
    return fn, {"x": value}


def _rule_choice(anchor: Call) -> str:
    with choices.using(None):
        strategy = CHOOSERS[anchor.op.name](anchor)  # type: ignore[union-attr]
    return strategy.name if isinstance(strategy, NativeKernel) else type(strategy).__name__


def tune(model: Any, db_path: str | Path | None = None) -> TuneReport:
    """Measure every tunable anchor of `model` (what `codegen.build` takes) under the
    current PassContext (its thread budget) and record the times in the kernel database
    (db_path, default this CPU's file in the user cache). Returns what was measured."""
    path = Path(db_path) if db_path is not None else default_path()
    db = KernelTimes.open(path)
    exe = build(model)
    assert exe.module is not None
    measured = []
    for key, (anchor, candidates) in anchors(exe.module).items():
        fn, inputs = _alone(anchor)
        result = choices.measure(key, candidates, partial(build, fn), inputs)
        db.record(key, result.seconds)
        measured.append(TunedKernel(key, result.seconds, result.best, _rule_choice(anchor)))
    db.save()
    return TuneReport(path, measured)
