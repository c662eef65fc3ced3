"""Soak: every real model compiled once, then run round after round for a given time, with
an optional busy neighbour process; every result must equal the first run's bit for bit
and agree with the recorded ONNX Runtime output. A hang shows as a round that never ends
(a watchdog prints every thread's stack and exits 3 after --stall seconds).

    .venv/bin/python benchmarks/soak.py --seconds 3600 --neighbour [--threads 2]

Prints one progress line every --report seconds and a summary: runs per model, rounds,
results that differed, the slowest round.
"""

from __future__ import annotations

import argparse
import faulthandler
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

import codegen
import passmgr as pm

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "real"


def busy() -> None:
    """The neighbour: one core's worth of pure Python arithmetic."""
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2**31


def flat(value: object) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [a for v in value for a in flat(v)]
    return [np.asarray(value)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--neighbour", action="store_true", help="run a busy process beside")
    parser.add_argument("--report", type=float, default=300.0, help="seconds between lines")
    parser.add_argument("--stall", type=float, default=120.0, help="a round this long: a hang")
    args = parser.parse_args()
    models = []
    for path in sorted(REAL.glob("*.onnx")):
        with pm.PassContext(opt_level=3, config={"codegen.num_threads": args.threads}):
            exe = codegen.build(str(path))
        data = np.load(path.with_suffix(".npz"))
        feeds = {k: data[k] for k in exe.input_types}
        first = flat(exe.run(**feeds))
        error = float(np.max(np.abs(first[0] - data["expected"])))
        print(f"{path.stem}: compiled, max |ours - recorded| {error:.2e}", flush=True)
        models.append((path.stem, exe, feeds, first))
    neighbour = None
    if args.neighbour:
        neighbour = multiprocessing.Process(target=busy, daemon=True)
        neighbour.start()
    runs = dict.fromkeys((m[0] for m in models), 0)
    differing, rounds, slowest = 0, 0, 0.0
    start = time.monotonic()
    next_report = start + args.report
    try:
        while time.monotonic() - start < args.seconds:
            faulthandler.dump_traceback_later(args.stall, exit=True)
            began = time.monotonic()
            for name, exe, feeds, first in models:
                out = flat(exe.run(**feeds))
                pairs = zip(out, first, strict=True)
                if not all(np.array_equal(a, b, equal_nan=True) for a, b in pairs):
                    differing += 1
                    print(f"DIFF {name} after {runs[name]} runs", flush=True)
                runs[name] += 1
            faulthandler.cancel_dump_traceback_later()
            slowest = max(slowest, time.monotonic() - began)
            rounds += 1
            if time.monotonic() >= next_report:
                minutes = (time.monotonic() - start) / 60
                print(f"{minutes:.0f} min: {rounds} rounds, {differing} differing", flush=True)
                next_report += args.report
    finally:
        if neighbour is not None:
            neighbour.terminate()
    print(f"runs {runs}", flush=True)
    print(
        f"{sum(runs.values())} runs in {rounds} rounds over {(time.monotonic() - start) / 60:.1f}"
        f" min, {differing} differing, slowest round {slowest:.3f} s, "
        f"neighbour {'on' if args.neighbour else 'off'}",
        flush=True,
    )
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
