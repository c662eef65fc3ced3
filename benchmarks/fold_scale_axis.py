"""Benchmark: how many multiplies FoldScaleAxis removes from the built-in and real models
under the standard pipeline at opt level 3 (the pass on against the pass disabled), and the
time it takes. Not a test: read the table.

    .venv/bin/python benchmarks/fold_scale_axis.py
"""

from __future__ import annotations

from pathlib import Path

import egraph_ir as ir
import passmgr as pm
from egraph_ir import models
from passmgr.standard import standard_pipeline

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "real"


def multiplies(mod: ir.IRModule) -> int:
    return sum(
        isinstance(n, ir.Call) and getattr(n.op, "name", "") == "multiply"
        for fn in mod.functions.values()
        for n in ir.post_order(fn.body)
    )


def _seconds(root: pm.instrument.TimingNode, name: str) -> float:
    """Time of every run of the named pass in a timing tree."""
    total, stack = 0.0, [root]
    while stack:
        node = stack.pop()
        total += node.seconds if node.name == name else 0.0
        stack.extend(node.children)
    return total


def main() -> None:
    cases = [(name, models.get(name)) for name in models.NAMES]
    if REAL.exists():
        from egraph_ir.frontend import from_onnx

        cases += [(p.stem, from_onnx(p)) for p in sorted(REAL.glob("*.onnx"))]
    print(f"{'model':<14} {'imported':>9} {'without':>8} {'with':>6} {'removed':>8} {'pass ms':>8}")
    for name, mod in cases:
        with pm.PassContext(opt_level=3, disabled_pass=["FoldScaleAxis"]):
            without = multiplies(standard_pipeline()(mod))
        timing = pm.PassTimingInstrument()
        with pm.PassContext(opt_level=3, instruments=[timing]):
            folded = multiplies(standard_pipeline()(mod))
        seconds = _seconds(timing.root, "FoldScaleAxis")
        print(
            f"{name:<14} {multiplies(mod):>9} {without:>8} {folded:>6} {without - folded:>8} "
            f"{seconds * 1e3:>8.1f}"
        )


if __name__ == "__main__":
    main()
