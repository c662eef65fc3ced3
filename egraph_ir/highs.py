"""One way to make a quiet HiGHS solver and to fill its model (the ILP extractor, the
device cut and the target placement use it).

highspy prints a copyright banner from C++ to the process's stdout when the first solver of
a process is made, before any option can turn output off; that first construction runs
with file descriptor 1 pointed at /dev/null so command-line output stays clean.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from .errors import CompilerError

_lock = threading.Lock()
_quiet = False


def new_highs(time_limit: float | None = None) -> Any:
    """A single-threaded HiGHS instance with logging off and zero MIP gaps (relative and
    absolute: placement costs are microseconds)."""
    import highspy

    global _quiet
    with _lock:
        if not _quiet:
            sys.stdout.flush()
            saved = os.dup(1)
            try:
                with open(os.devnull, "w") as null:
                    os.dup2(null.fileno(), 1)
                    h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
            _quiet = True
        else:
            h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.0)  # costs in seconds: 1e-6 absolute would hide them
    if time_limit is not None:
        h.setOptionValue("time_limit", time_limit)
    return h


GRACE_S = 0.05  # how long past its deadline a run may take to come back
_running: set[threading.Thread] = set()  # runs abandoned at their deadline, still stopping


@atexit.register
def _wait_for_abandoned_runs() -> None:
    """A HiGHS run still going when the interpreter exits aborts the process from C++
    ("terminate called without an active exception"): wait for each to take its interrupt."""
    for thread in list(_running):
        thread.join()


def run_until(h: Any, deadline: float) -> bool:
    """h.run(), returning by `deadline` (time.perf_counter()) whatever the solver does:
    True when the run ended, False when it was still running (then `h` belongs to the
    abandoned run: the caller must drop it and keep what it had). HiGHS checks its own
    time_limit only between phases: a presolve of 166k nonzeros took 6.6 s of a 3.8 s
    limit, 10 s under load. Its interrupt callbacks stop it at the next check after the
    deadline; the run is in a thread (HiGHS frees the GIL), so nobody waits for that."""
    import time

    if getattr(h, "egc_deadline", None) is None:  # the callbacks, once per solver
        h.egc_deadline = [deadline]

        def check(event: Any) -> None:
            if time.perf_counter() > h.egc_deadline[0]:
                event.interrupt()

        h.cbSimplexInterrupt += check
        h.cbIpmInterrupt += check
        h.cbMipInterrupt += check
    h.egc_deadline[0] = deadline
    done = threading.Event()

    def work() -> None:
        try:
            h.run()
        finally:
            done.set()
            _running.discard(threading.current_thread())

    thread = threading.Thread(target=work, name="highs", daemon=True)
    _running.add(thread)
    thread.start()
    return done.wait(max(0.0, deadline - time.perf_counter()) + GRACE_S)


Row = tuple[float, float, list[tuple[int, float]]]  # lower, upper, (column, coefficient)s


def add_columns(
    h: Any, costs: Sequence[float], integral: int, lower: Any = None, upper: Any = None
) -> None:
    """Columns in [lower, upper] (default [0, 1]) with these costs; the first `integral`
    of them integer (binaries), the rest continuous."""
    import highspy
    import numpy as np

    n = len(costs)
    h.addVars(
        n,
        np.zeros(n) if lower is None else np.asarray(lower, dtype=float),
        np.ones(n) if upper is None else np.asarray(upper, dtype=float),
    )
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.asarray(costs, dtype=float))
    if integral:
        kinds = np.array([highspy.HighsVarType.kInteger] * integral)
        h.changeColsIntegrality(integral, np.arange(integral, dtype=np.int32), kinds)


def add_rows(h: Any, rows: Sequence[Row]) -> None:
    """Constraints lower <= sum(coefficient * column) <= upper, in one call."""
    import highspy
    import numpy as np

    if not rows:
        return
    lo = np.array([r[0] for r in rows], dtype=float)
    hi = np.array([r[1] for r in rows], dtype=float)
    starts = np.cumsum([0] + [len(r[2]) for r in rows[:-1]]).astype(np.int32)
    index = np.array([j for r in rows for j, _ in r[2]], dtype=np.int32)
    value = np.array([v for r in rows for _, v in r[2]], dtype=float)
    status = h.addRows(len(rows), lo, hi, len(index), starts, index, value)
    if status != highspy.HighsStatus.kOk:
        raise CompilerError("the integer program could not be built (HiGHS refused its rows)")
