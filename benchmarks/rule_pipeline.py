"""Benchmark: the standard rule-based pipeline on each built-in model.

Prints, per model, the wall time of each pass (median of several runs), the e-graph size and
stop reason of each EqSat pass, op counts before and after, and the extraction cost before
and after. Not a test: machines are shared and noisy, so read medians and ratios.

    .venv/bin/python benchmarks/rule_pipeline.py [--repeat 5] [--models mlp,cnn,...]
"""

from __future__ import annotations

import argparse
import statistics
import time

import egraph_ir as ir
import passmgr as pm
from egraph_ir import models
from egraph_ir.summary import summarize
from passmgr.standard import standard_pipeline


def walk(node: dict, depth: int = 0):
    yield node, depth
    for c in node["children"]:
        yield from walk(c, depth + 1)


def bench(name: str, repeat: int) -> None:
    times: dict[str, list[float]] = {}
    totals = []
    for _ in range(repeat):
        mod = models.get(name)
        timing = pm.PassTimingInstrument()
        t0 = time.perf_counter()
        with pm.PassContext(opt_level=3, instruments=[timing]) as ctx:
            out = standard_pipeline()(mod)
        totals.append(time.perf_counter() - t0)
        for node, depth in walk(timing.to_dict()):
            if depth == 2:
                times.setdefault(node["name"], []).append(node["seconds"])
    before, after = summarize(models.get(name)), summarize(out)
    print(
        f"\n== {name}: pipeline median {statistics.median(totals) * 1e3:.1f} ms "
        f"(min {min(totals) * 1e3:.1f}, {repeat} runs)"
    )
    for pass_name, ts in times.items():
        ran = [
            r
            for r in ctx.run.reports(pass_name, pm.passes.EqSatReport)
            if not r.skipped and r.stop_reason
        ]
        extra = ""
        if ran:
            r = ran[-1]
            extra = (
                f"  e-nodes {r.enodes:>6}  applied {r.rules_applied:>4}"
                f"  stop {r.stop_reason:<15} cost {r.cost_before:.3g} -> {r.cost_after:.3g}"
            )
        print(f"  {pass_name:<20} {statistics.median(ts) * 1e3:8.1f} ms{extra}")
    print(f"  ops before: {dict(before.ops.most_common())}")
    print(f"  ops after:  {dict(after.ops.most_common())}")
    print(f"  FLOPs {before.flops / 1e6:.1f} M -> {after.flops / 1e6:.1f} M")
    ir.infer_type(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", default=",".join(models.NAMES))
    args = parser.parse_args()
    for name in args.models.split(","):
        bench(name, args.repeat)


if __name__ == "__main__":
    main()
