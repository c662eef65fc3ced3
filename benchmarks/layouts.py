"""Benchmark: blocked layouts (NCHW16c) chosen by the BlockLayout pass against the NCHW
build, and the convolution kernels' rates by kind and layout that its cost model uses.

For each model: every distinct convolution timed alone in NCHW and in each blocked form
(codegen/measure/kernel_rates.py; the medians per kind are what egraph_ir/egraph/kernel_cost.py's
MEASURED_GFLOPS holds), then the whole model built with `layout.blocked` on and off and
run in alternating rounds: medians, p10s and the ratio blocked / NCHW, with how many
convolutions the extraction blocked and how many conversions it kept. Nothing is saved
(`egc tune` saves measurements). Machines are noisy: compare ratios of one run.

    .venv/bin/python benchmarks/layouts.py [--models mobilenet_v2,efficientnet_b0]
        [--rounds 30] [--no-rates]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import codegen
import passmgr as pm
from codegen.measure.kernel_rates import measure
from egraph_ir.frontend import from_onnx
from egraph_ir.visitor import post_order

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "real"
MODELS = ("mobilenet_v2", "efficientnet_b0", "resnet18")


def count(mod, name: str) -> int:
    return sum(
        1
        for fn in mod.functions.values()
        for e in post_order(fn)
        if getattr(getattr(e, "op", None), "name", "") == name
    )


def compare(name: str, rounds: int) -> None:
    data = np.load(REAL / f"{name}.npz")
    inputs = {k: data[k] for k in data.files if k != "expected"}
    exes, chosen = {}, {}
    for blocked in (False, True):
        with pm.PassContext(opt_level=3, config={"layout.blocked": blocked}):
            t0 = time.perf_counter()
            exes[blocked] = codegen.build(from_onnx(REAL / f"{name}.onnx"))
            print(f"  build {'blocked' if blocked else 'NCHW'}: {time.perf_counter() - t0:.2f} s")
        mod = exes[blocked].module
        chosen[blocked] = (count(mod, "conv2d_nchwc"), count(mod, "layout_transform"))
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for blocked, exe in exes.items():
            exe.run(**inputs)
            t0 = time.perf_counter()
            for _ in range(5):
                exe.run(**inputs)
            times[blocked].append((time.perf_counter() - t0) / 5 * 1e3)
    convs, conversions = chosen[True]
    print(f"  blocked convolutions {convs}, conversions kept {conversions}")
    for blocked in (False, True):
        t = times[blocked]
        print(
            f"  {'blocked' if blocked else 'NCHW':8s} median {statistics.median(t):.3f} ms"
            f"  p10 {np.percentile(t, 10):.3f} ms"
        )
    ratio = statistics.median(times[True]) / statistics.median(times[False])
    print(f"  blocked / NCHW {ratio:.3f} (median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--no-rates", dest="rates", action="store_false")
    args = parser.parse_args()
    if not REAL.exists():
        raise SystemExit(f"no real models at {REAL}")
    for name in args.models.split(","):
        print(f"{name}:")
        if args.rates:
            with pm.PassContext(opt_level=3):
                result = measure(REAL / f"{name}.onnx", rounds=3)
            for kind, rate, layers in result.rows():
                print(f"  {kind:40s} {rate:>7s} GFLOP/s over {layers} layer(s)")
        compare(name, args.rounds)


if __name__ == "__main__":
    main()
