"""The `egc` command line.

`egc demo` runs the main job on a built-in model. Today that is: build, type-check,
summarise and interpret; later stages (optimise, compile, compare) join as they land.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import egraph_ir as ir
from egraph_ir import models
from egraph_ir.errors import CompilerError
from egraph_ir.summary import input_types, summarize


def _fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} "


def demo(model: str, show_ir: int) -> int:
    t0 = time.perf_counter()
    mod = models.get(model)
    t1 = time.perf_counter()
    ir.infer_type(mod)
    t2 = time.perf_counter()
    s = summarize(mod)
    inputs = models.example_inputs(model)
    t3 = time.perf_counter()
    out = ir.interpret(mod, **inputs)
    t4 = time.perf_counter()

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
        f"time: build {1e3 * (t1 - t0):.1f} ms, infer_type {1e3 * (t2 - t1):.1f} ms, "
        f"interpret {1e3 * (t4 - t3):.1f} ms"
    )
    arr = np.asarray(out)
    print(
        f"result: shape {arr.shape}, mean {arr.mean():.6f}, std {arr.std():.6f}, "
        f"finite {bool(np.isfinite(arr).all())}"
    )
    if show_ir:
        lines = mod.astext(show_meta=False).splitlines()
        print(f"\nIR ({len(lines)} lines, first {min(show_ir, len(lines))}):")
        print("\n".join(lines[:show_ir]))
    return 0


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
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return demo(args.model, args.show_ir)
    except CompilerError as exc:
        print(f"egc: error: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
