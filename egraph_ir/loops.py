"""Loop functions: what a function with `Loop=1` means when it is called, in one place for
the interpreter and the compiled runtime (codegen/external/loop.py).

Its parameters are (step, condition, carried values, outside values) and it returns
(next condition, next carried values): one step of the loop. Called with (trip count,
condition, carried values, outside values) it runs that step while the step number is
below the trip count and the condition holds (ONNX's Loop), and returns the last
(condition, carried values). The ONNX importer makes them
(egraph_ir/frontend/onnx/control.py); inliners leave them alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .expr import Function, Tuple

LOOP_ATTR = "Loop"


def is_loop(fn: Function) -> bool:
    return bool(fn.attrs.get(LOOP_ATTR))


def carried_count(fn: Function) -> int:
    """How many values a loop function carries: its result is (condition, *carried)."""
    if isinstance(fn.body, Tuple):
        return len(fn.body.fields) - 1
    ret = fn.ret_type if fn.ret_type is not None else fn.body.checked_type
    return len(getattr(ret, "fields", ())) - 1


def _scalar(value: Any) -> Any:
    return np.asarray(value).reshape(-1)[0]


def run_loop(
    step: Callable[[list[Any]], Sequence[Any]], args: Sequence[Any], carried: int
) -> tuple[Any, ...]:
    """The loop's result for call arguments `args`; `step(feeds)` runs the body on
    (step number, condition, carried, outside) and returns (condition, *carried)."""
    trips, going, *values = args
    state: list[Any] = [np.asarray(going), *values[:carried]]
    outside = list(values[carried:])
    count = 0
    while count < int(_scalar(trips)) and bool(_scalar(state[0])):
        state = list(step([np.asarray(count, np.int64), *state, *outside]))
        count += 1
    return tuple(state)
