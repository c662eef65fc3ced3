"""The counts the README quotes, from the live registries; run it to rewrite them.

    .venv/bin/python benchmarks/counts.py          # print them
    .venv/bin/python benchmarks/counts.py --write  # update README.md and docs/*.md

A count is written as `<!-- count:NAME -->N<!-- /count -->`; tests/test_docs.py checks
that every quoted count equals the live one.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"(<!-- count:(\w+) -->)([\d,]+)(<!-- /count -->)")


def counts() -> dict[str, int]:
    import codegen  # noqa: F401  (its config keys)
    import passmgr as pm
    import rules
    from egraph_ir import op
    from egraph_ir.frontend import supported_ops

    return {
        "ops": len(op.list_ops()),
        "onnx_ops": len(supported_ops()),
        "rules": sum(len(list(rules.builtin(name))) for name in rules.builtin_names()),
        "rule_files": len(rules.builtin_names()),
        "passes": len(pm.list_passes()),
        "config_keys": len(pm.list_configs()),
    }


def rewrite(text: str, live: dict[str, int]) -> str:
    return MARK.sub(lambda m: f"{m.group(1)}{live[m.group(2)]:,}{m.group(4)}", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite README.md and docs/")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    live = counts()
    if args.json:
        print(json.dumps(live))
        return
    for name, value in live.items():
        print(f"{name:>12} {value}")
    if args.write:
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
            page.write_text(rewrite(page.read_text(), live))


if __name__ == "__main__":
    main()
