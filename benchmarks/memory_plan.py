"""Benchmark: every registered memory planner on the built-in and real models, against the
lower bound (the most bytes alive at one step). Not a test: read the table.

    .venv/bin/python benchmarks/memory_plan.py
"""

from __future__ import annotations

from pathlib import Path

import codegen
import passmgr as pm
from codegen.plan.memory import list_memory_planners
from egraph_ir import models

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "real"


def main() -> None:
    cases = [(name, models.get(name)) for name in models.NAMES]
    if REAL.exists():
        from egraph_ir.frontend import from_onnx

        cases += [(p.stem, from_onnx(p)) for p in sorted(REAL.glob("*.onnx"))]
    planners = list_memory_planners()
    print(f"{'model':<14} {'lower bound':>12}  " + "  ".join(f"{p:>20}" for p in planners))
    for name, mod in cases:
        cells, bound = [], 0
        for planner in planners:
            with pm.PassContext(opt_level=3, config={"codegen.memory_planner": planner}):
                exe = codegen.build(mod)
            plan = exe.memory_plan
            bound = plan.lower_bound
            seconds = exe.compile_seconds.get("plan", 0.0)
            cells.append(
                f"{plan.bytes / 2**20:7.2f} MiB +{plan.overhead:5.1%} {seconds * 1e3:4.0f}ms"
            )
        print(f"{name:<14} {bound / 2**20:8.2f} MiB  " + "  ".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    main()
