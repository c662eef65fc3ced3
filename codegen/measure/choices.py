"""Kernel choices by measured time: how long each candidate kernel took on one anchor
shape, in this CPU's store of kernel timings (egraph_ir/measured.py, which the layout cost
model reads too), written by `egc tune` and read by every compile.

Lowering asks `choose(key, candidates)`: with every candidate measured for that shape it
gets the fastest, otherwise None and the shape rules in codegen/lower/select.py decide
(they are what the measurements on this project's models said). The store is this CPU's
file in the project's cache folder, or the file `codegen.kernel_db` names;
`codegen.kernel_db=off` ignores it.

Measuring (`tune`) builds each anchor alone once per candidate, with the candidate forced
(`forcing`), and times the candidates in turn, round after round, with the executable's
thread budget: a median of round medians, so a busy moment does not decide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError
from egraph_ir.measured import KernelTimes, cpu_id, default_path

from .timer import interleaved_medians


def resolve(setting: str) -> KernelTimes | None:
    """The database a `codegen.kernel_db` setting names: "auto" the per-CPU file when it
    exists, "off" none, anything else a path (which must exist)."""
    if setting == "off":
        return None
    if setting == "auto":
        path = default_path()
        return KernelTimes.open(path) if path.exists() else None
    path = Path(setting)
    if not path.exists():
        raise CodegenError(f"codegen.kernel_db: no file {path} (run `egc tune` to make one)")
    db = KernelTimes.open(path)
    if db.cpu != cpu_id():
        raise CodegenError(
            f"codegen.kernel_db: {path} was measured on {db.cpu}, this CPU is {cpu_id()}: "
            "its times say nothing here (run `egc tune` on this machine)"
        )
    return db


_ACTIVE: ContextVar[KernelTimes | None] = ContextVar("kernel_db", default=None)
_FORCED: ContextVar[str | None] = ContextVar("forced_kernel", default=None)


@contextlib.contextmanager
def using(db: KernelTimes | None) -> Iterator[None]:
    """Lowering inside reads its choices from db."""
    token = _ACTIVE.set(db)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextlib.contextmanager
def forcing(candidate: str) -> Iterator[None]:
    """Lowering inside picks `candidate` wherever it is one of the candidates."""
    token = _FORCED.set(candidate)
    try:
        yield
    finally:
        _FORCED.reset(token)


def choose(key: str, candidates: Sequence[str]) -> str | None:
    """The forced candidate, else the measured fastest, else None (the rules decide)."""
    forced = _FORCED.get()
    if forced in candidates:
        return forced
    db = _ACTIVE.get()
    return db.fastest(key, candidates) if db is not None else None


@dataclass(frozen=True)
class Measured:
    key: str
    seconds: dict[str, float]

    @property
    def best(self) -> str:
        return min(self.seconds, key=lambda c: self.seconds[c])


def measure(
    key: str,
    candidates: Sequence[str],
    build: Callable[[], Any],
    inputs: dict[str, np.ndarray],
) -> Measured:
    """Each candidate forced, built by `build`, then all timed on inputs in turn."""
    exes = {}
    for candidate in candidates:
        with forcing(candidate):
            exes[candidate] = build()
    runs = {c: partial(exe.run, **inputs) for c, exe in exes.items()}
    return Measured(key, interleaved_medians(runs))
