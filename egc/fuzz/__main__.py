"""`python -m egc.fuzz --seconds 600 [--out fuzz-failures] [--seed 0] [--kinds program,edges]
[--cases N]`: see runner.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from .runner import KINDS, fuzz, is_failure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", default="fuzz-failures")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default="", help="fuzzers to run, comma-separated (all)")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    args = parser.parse_args()
    kinds = tuple(k for k in args.kinds.split(",") if k) or KINDS
    try:
        counts = fuzz(args.seconds, Path(args.out), args.seed, kinds=kinds, cases=args.cases)
    except ValueError as e:
        parser.error(str(e))
    cases = {k: v for k, v in counts.items() if " " not in k}
    labels = {k: v for k, v in counts.items() if " " in k and not is_failure(k)}
    bad = {k: v for k, v in counts.items() if is_failure(k)}
    print(f"cases: {dict(cases)} (total {sum(cases.values())}); by label: {labels}")
    print(f"failures: {dict(bad) or 'none'}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
