"""Kernel choices by measured time: a per-CPU database of how long each candidate kernel
took on one anchor shape, written by `egc tune` and read by every compile.

Lowering asks `choose(key, candidates)`: with every candidate measured for that shape it
gets the fastest, otherwise None and the shape rules in codegen/lower/select.py decide
(they are what the measurements on this project's models said). The database is one JSON
file per CPU (LLVM's host CPU name and a digest of its features, since the generated code
depends on both) under `$XDG_CACHE_HOME/egraph-compiler/` (default `~/.cache`), or the
file `codegen.kernel_db` names; `codegen.kernel_db=off` ignores it.

Measuring (`tune`) builds each anchor alone once per candidate, with the candidate forced
(`forcing`), and times the candidates in turn, round after round, with the executable's
thread budget: a median of round medians, so a busy moment does not decide.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from egraph_ir.cache import cache_root
from egraph_ir.errors import CodegenError

from .timer import interleaved_medians

FORMAT = 1


@cache
def cpu_id() -> str:
    """The host CPU's name and a digest of its features (what the generated code uses)."""
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features().flatten()
    return f"{llvm.get_host_cpu_name()}-{hashlib.sha256(features.encode()).hexdigest()[:8]}"


def default_path() -> Path:
    """This CPU's database in the project's user cache directory (platformdirs; the
    compile cache of egc lives beside it)."""
    return cache_root() / f"kernels-{cpu_id()}.json"


@dataclass
class KernelDB:
    """Measured seconds per anchor key and candidate kernel, for one CPU."""

    path: Path
    cpu: str = field(default_factory=cpu_id)
    times: dict[str, dict[str, float]] = field(default_factory=dict)

    @staticmethod
    def open(path: Path) -> KernelDB:
        """The database at path (empty when there is no file yet)."""
        if not path.exists():
            return KernelDB(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CodegenError(f"kernel database {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CodegenError(f"kernel database {path}: not a kernel database of format {FORMAT}")
        if not isinstance(data.get("kernels"), dict):
            raise CodegenError(f"kernel database {path}: no 'kernels' table")
        try:
            times = {
                str(k): {str(c): float(s) for c, s in v.items()} for k, v in data["kernels"].items()
            }
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise CodegenError(f"kernel database {path}: {exc}") from None
        return KernelDB(path, str(data.get("cpu", "")), times)

    def save(self) -> None:
        """Write atomically (a temporary file beside it, then renamed)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"format": FORMAT, "cpu": self.cpu, "kernels": self.times}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def fastest(self, key: str, candidates: Sequence[str]) -> str | None:
        """The fastest candidate when all of them were measured for key, else None."""
        measured = self.times.get(key, {})
        if not candidates or any(c not in measured for c in candidates):
            return None
        return min(candidates, key=lambda c: measured[c])


def resolve(setting: str) -> KernelDB | None:
    """The database a `codegen.kernel_db` setting names: "auto" the per-CPU file when it
    exists, "off" none, anything else a path (which must exist)."""
    if setting == "off":
        return None
    if setting == "auto":
        path = default_path()
        return KernelDB.open(path) if path.exists() else None
    path = Path(setting)
    if not path.exists():
        raise CodegenError(f"codegen.kernel_db: no file {path} (run `egc tune` to make one)")
    db = KernelDB.open(path)
    if db.cpu != cpu_id():
        raise CodegenError(
            f"codegen.kernel_db: {path} was measured on {db.cpu}, this CPU is {cpu_id()}: "
            "its times say nothing here (run `egc tune` on this machine)"
        )
    return db


_ACTIVE: ContextVar[KernelDB | None] = ContextVar("kernel_db", default=None)
_FORCED: ContextVar[str | None] = ContextVar("forced_kernel", default=None)


@contextlib.contextmanager
def using(db: KernelDB | None) -> Iterator[None]:
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
