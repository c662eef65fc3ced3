"""The `egc` command line.

`egc demo` runs the main job on a built-in model. Today that is: build, type-check, optimise
with the standard rule-based pipeline, and run the result with the reference interpreter
against the original; compilation joins as it lands.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import egraph_ir as ir
import passmgr as pm
from egraph_ir import models
from egraph_ir.errors import CompilerError
from egraph_ir.summary import input_types, summarize

from .pipelines import standard_pipeline


def _fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} "


def demo(model: str, show_ir: int) -> int:
    t0 = time.perf_counter()
    original = models.get(model)
    t1 = time.perf_counter()
    ir.infer_type(original)
    t2 = time.perf_counter()
    timing = pm.PassTimingInstrument()
    with pm.PassContext(opt_level=3, instruments=[timing]) as ctx:
        mod = standard_pipeline()(original)
    s_before, s = summarize(original), summarize(mod)
    inputs = models.example_inputs(model)
    t3 = time.perf_counter()
    out = ir.interpret(mod, **inputs)
    t4 = time.perf_counter()
    reference = np.asarray(ir.interpret(original, **inputs))

    print(f"model: {model} (built-in, seeded weights)")
    for name, ty in input_types(mod).items():
        print(f"  input  %{name}: {ty}")
    print(f"  output {mod['main'].body.checked_type}")
    print(
        f"  {s.num_calls} op calls, {s.constants} constants "
        f"({_fmt_count(s.constant_elements).strip()} parameters, "
        f"{s.constant_bytes / 2**20:.2f} MiB)"
    )
    print(f"  work: {_fmt_count(s.flops)}FLOP, {_fmt_count(s.bytes_moved)}B moved op by op")
    print("  ops:      " + ", ".join(f"{k} x{v}" for k, v in s.ops.most_common()))
    print("  patterns: " + ", ".join(f"{k} x{v}" for k, v in s.patterns.most_common()))
    print(
        f"optimised from {s_before.num_calls} op calls ({_fmt_count(s_before.flops)}FLOP): "
        + ", ".join(f"{k} x{v}" for k, v in s_before.ops.most_common())
    )
    print("passes (standard pipeline):")
    print("\n".join("  " + line for line in timing.render().splitlines()[1:]))
    for name, counters in ctx.statistics.items():
        if "e-nodes" in counters:
            stop = next((k[9:] for k in counters if k.startswith("stopped: ")), "?")
            print(
                f"  {name}: {int(counters['rules applied'])} rewrites, "
                f"{int(counters['e-nodes'])} e-nodes, {stop}, cost "
                f"{counters['cost before']:.4g} -> {counters['cost after']:.4g}"
            )
    print(
        f"time: build {1e3 * (t1 - t0):.1f} ms, infer_type {1e3 * (t2 - t1):.1f} ms, "
        f"interpret {1e3 * (t4 - t3):.1f} ms"
    )
    arr = np.asarray(out)
    print(
        f"result: shape {arr.shape}, mean {arr.mean():.6f}, std {arr.std():.6f}, "
        f"finite {bool(np.isfinite(arr).all())}, "
        f"max |optimised - original| {float(np.max(np.abs(arr - reference))):.2e}"
    )
    if show_ir:
        lines = mod.astext(show_meta=False).splitlines()
        print(f"\nIR ({len(lines)} lines, first {min(show_ir, len(lines))}):")
        print("\n".join(lines[:show_ir]))
    return 0


def rules_check(sources: list[str], max_examples: int, seed: int) -> int:
    """Property-test rule files (or built-in set names): 0 when all are sound, 1 if not."""
    import rules

    status = 0
    for source in sources:
        is_builtin = source in rules.builtin_names() and not Path(source).exists()
        rule_set = rules.builtin(source) if is_builtin else rules.load(source)
        report = rules.check_soundness(rule_set, max_examples=max_examples, seed=seed)
        print(f"{source}: {report}")
        if not report.ok:
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egc", description="e-graph tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="run the main job on a built-in model")
    p_demo.add_argument("--model", default="transformer", choices=models.NAMES)
    p_demo.add_argument(
        "--show-ir",
        type=int,
        default=40,
        metavar="N",
        help="print the first N lines of the IR (0: none)",
    )
    p_rules = sub.add_parser("rules", help="work with rule files")
    rules_sub = p_rules.add_subparsers(dest="rules_command", required=True)
    p_check = rules_sub.add_parser(
        "check", help="property-test rules: exit 0 when sound, 1 with the counterexamples"
    )
    p_check.add_argument("files", nargs="+", metavar="FILE", help="a .rules file or built-in set")
    p_check.add_argument("--max-examples", type=int, default=100, metavar="N")
    p_check.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return demo(args.model, args.show_ir)
        if args.command == "rules" and args.rules_command == "check":
            return rules_check(args.files, args.max_examples, args.seed)
    except CompilerError as exc:
        print(f"egc: error: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
