"""One way to make a quiet HiGHS solver (the ILP extractor and the device cut use it).

highspy prints a copyright banner from C++ to the process's stdout when the first solver of
a process is made, before any option can turn output off; that first construction runs
with file descriptor 1 pointed at /dev/null so command-line output stays clean.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

_lock = threading.Lock()
_quiet = False


def new_highs(time_limit: float | None = None) -> Any:
    """A single-threaded HiGHS instance with logging off and a zero MIP gap."""
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
    if time_limit is not None:
        h.setOptionValue("time_limit", time_limit)
    return h
