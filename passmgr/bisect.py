"""Find the first pass of a pipeline that breaks a program (LLVM's opt-bisect, automated).

Runs the pipeline with `pass.bisect_limit = n` for a binary search over n: passes beyond the
limit are skipped (always-run passes such as InferType still run), so about log2(#passes)
runs name the first optional pass after which `is_good(module)` fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from egraph_ir.module import IRModule

from .context import PassContext
from .pass_base import Pass
from .run import separate_run


@dataclass(frozen=True)
class BisectResult:
    culprit: str | None  # None when the whole pipeline keeps the program good
    index: int  # 1-based position among the optional passes (0 when no culprit)
    runs: int


def bisect_pipeline(
    pipeline: Pass, mod: IRModule, is_good: Callable[[IRModule], bool]
) -> BisectResult:
    """Binary-search the optional passes of pipeline for the first one that makes is_good
    false. The current context's opt level, pass lists and config are kept."""
    base = PassContext.current()
    runs = 0

    def run(limit: int) -> tuple[bool, list[str]]:
        nonlocal runs
        runs += 1
        with separate_run() as log, base.derive(config={"pass.bisect_limit": limit}):
            out = pipeline(mod)
        return is_good(out), log.optional_passes

    good, names = run(-1)
    if good:
        return BisectResult(None, 0, runs)
    lo, hi = 0, len(names)  # invariant: limit lo is good (assumed for 0), limit hi is bad
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid)[0]:
            lo = mid
        else:
            hi = mid
    return BisectResult(names[hi - 1], hi, runs)
