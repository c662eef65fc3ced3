"""Repeated builds in one process stay flat (issue #36): LLVM's optimisation pipeline kept
about 0.12 MB per module inside the building process (400 builds: +43 MB), which a tuning
loop of thousands of builds turns into gigabytes. Modules now compile in helper processes
that are replaced after HELPER_MODULES modules."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import codegen
import egraph_ir as ir


def resident_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_sixty_builds_hold_their_memory() -> None:
    mod = ir.parse("def @main(%x: Tensor[(4, 8), float32]) { relu(add(%x, 1f)) }")
    x = np.ones((4, 8), "float32")
    for _ in range(20):  # caches and allocator pools settle first
        codegen.build(mod)
    gc.collect()
    before = resident_mb()
    for _ in range(60):
        exe = codegen.build(mod)
    gc.collect()
    growth = resident_mb() - before
    assert (exe.run(x=x) == 2.0).all()
    assert growth < 3.0, f"{growth:.1f} MB over 60 builds (about 7.5 MB before the fix)"
