"""PassRun: the log of one run of passes, kept apart from the configuration (PassContext).

The outermost `with PassContext(...)` block opens a PassRun; contexts nested in it (for
example ones made with `ctx.derive(...)` by a measured build) write into the same run. A pass
called outside any block writes into the thread's own run, which starts afresh at every
top-level call. What a run holds:

- `history`: the passes the latest top-level call ran, in order (for error messages);
- typed reports (`PassReport` subclasses, each declared beside its pass) in the order the
  passes recorded them; read them with `reports(...)`, `last(...)` or `total(...)`;
- `counters`: free-form counters for user-written passes (`passmgr.count("rewrites")`).

Nothing here parses a statistic's name: callers read report fields.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

_local = threading.local()


@dataclass(frozen=True, slots=True)
class PassReport:
    """Base of the typed reports passes record; `pass_name` is filled in when recorded."""

    def summary(self) -> str:
        """One line for a terminal: the report's fields."""
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value in ((), {}, None, "", False, 0):
                continue
            if isinstance(value, float):
                value = f"{value:.4g}"
            elif isinstance(value, dict):
                value = ", ".join(f"{k} {v}" for k, v in value.items())
            elif isinstance(value, tuple):
                value = ", ".join(map(str, value))
            parts.append(f"{f.name.replace('_', ' ')} {value}")
        return "; ".join(parts)


R = TypeVar("R", bound=PassReport)


@dataclass
class PassRun:
    """History, typed reports and counters of one run (see the module docstring)."""

    history: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)  # passes being run (nested Sequentials)
    optional_passes: list[str] = field(default_factory=list)  # reached, for bisection
    records: list[tuple[str, PassReport]] = field(default_factory=list)
    counters: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )

    @staticmethod
    def current() -> PassRun:
        """The run the passes of this thread write into now."""
        stack = _runs()
        return stack[-1]

    @property
    def owner(self) -> str:
        """The pass now running ('<no pass>' outside any)."""
        return self.running[-1] if self.running else "<no pass>"

    def add(self, report: PassReport) -> None:
        self.records.append((self.owner, report))

    def reports(self, pass_name: str | None = None, kind: type[R] | None = None) -> list[R]:
        """The reports recorded so far, of one pass and/or one report type."""
        found: list[R] = []
        for name, r in self.records:
            if (pass_name is None or name == pass_name) and (kind is None or isinstance(r, kind)):
                found.append(r)  # type: ignore[arg-type]
        return found

    def last(self, pass_name: str, kind: type[R] | None = None) -> R:
        """The latest report of a pass (KeyError naming the passes that reported if none)."""
        found = self.reports(pass_name, kind)
        if not found:
            names = sorted({name for name, _ in self.records})
            raise KeyError(f"no report from pass '{pass_name}'; reports from: {names}")
        return found[-1]

    def total(self, pass_name: str, field_name: str) -> float:
        """A numeric field summed over every report of a pass (one per function, say)."""
        found: list[PassReport] = self.reports(pass_name)
        return float(sum(getattr(r, field_name) for r in found))

    def clear(self) -> None:
        self.history.clear()
        self.optional_passes.clear()
        self.records.clear()
        self.counters.clear()

    def render(self) -> str:
        """Reports and counters as lines for a log."""
        lines = [f"{name:>24}  {report.summary()}" for name, report in self.records]
        for name, counts in self.counters.items():
            lines += [f"{name:>24}  {counter} {value:g}" for counter, value in counts.items()]
        return "\n".join(lines)


def _runs() -> list[PassRun]:
    if not hasattr(_local, "runs"):
        _local.runs = [PassRun()]  # the thread's own run, for passes called outside a block
    stack: list[PassRun] = _local.runs
    return stack


def open_run() -> PassRun:
    """Start the run of an outermost `with PassContext` block."""
    run = PassRun()
    _runs().append(run)
    return run


def close_run(run: PassRun) -> None:
    stack = _runs()
    if run in stack[1:]:
        stack.remove(run)


@contextmanager
def separate_run() -> Iterator[PassRun]:
    """A run of its own for the passes inside (e.g. each trial of a bisection), even within
    a block whose run would otherwise collect them."""
    run = open_run()
    try:
        yield run
    finally:
        close_run(run)


def in_block() -> bool:
    """Whether an outermost `with PassContext` block is open on this thread."""
    return len(_runs()) > 1


def record(report: PassReport) -> None:
    """Record a typed report for the pass now running."""
    PassRun.current().add(report)


def count(counter: str, amount: float = 1) -> None:
    """Add to a free-form counter of the pass now running (for user-written passes)."""
    run = PassRun.current()
    run.counters[run.owner][counter] += amount
