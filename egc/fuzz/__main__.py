"""`python -m egc.fuzz --seconds 600 [--out fuzz-failures] [--seed 0]`: see runner.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from .runner import fuzz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--out", default="fuzz-failures")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts = fuzz(args.seconds, Path(args.out), args.seed)
    cases = {k: v for k, v in counts.items() if " " not in k}
    bad = {k: v for k, v in counts.items() if " " in k}
    print(f"cases: {dict(cases)} (total {sum(cases.values())}); failures: {dict(bad) or 'none'}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
