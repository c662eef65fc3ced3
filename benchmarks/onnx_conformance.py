"""ONNX's node conformance cases (the data the `onnx` package ships) through this compiler.

    python benchmarks/onnx_conformance.py [--mode interpret|compiled|both] [--filter TEXT]

Every case is imported with `from_onnx` and run by the interpreter and/or `codegen.build`,
then compared with the expected outputs using the ONNX backend runner's tolerances (rtol
1e-3, atol 1e-7). Prints the pass counts and the failures grouped by cause: an unsupported
op or dtype (a clean CompilerError), a wrong number, or a crash (any other exception).
"""

from __future__ import annotations

import argparse
import sys
import time

import onnx

from egc.conformance import cases, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("interpret", "compiled", "both"), default="both")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--causes", type=int, default=40, help="how many causes to list")
    args = parser.parse_args()
    paths = cases(args.filter)
    print(f"{len(paths)} node cases with data (onnx {onnx.__version__})")
    modes = ("interpret", "compiled") if args.mode == "both" else (args.mode,)
    for mode in modes:
        t0 = time.perf_counter()
        passed, causes, wrong = run(mode, paths)
        print(f"\n{mode}: {passed} of {len(paths)} cases pass ({time.perf_counter() - t0:.0f} s)")
        for text, count in causes.most_common(args.causes):
            print(f"  {count:5d}  {text}")
        if wrong:
            print("  wrong results:", ", ".join(wrong[:30]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
