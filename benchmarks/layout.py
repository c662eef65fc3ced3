"""The source layout docs/architecture.md shows, generated from the tree; run it to rewrite it.

    .venv/bin/python benchmarks/layout.py          # print it
    .venv/bin/python benchmarks/layout.py --write  # update docs/architecture.md

One entry per package of the five layers, in the order of the layers: its folder, the
first sentence of its `__init__.py` docstring and its modules. The block sits between
`<!-- layout -->` and `<!-- /layout -->`; tests/test_docs.py checks it equals the tree.
"""

from __future__ import annotations

import argparse
import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["egraph_ir", "rules", "passmgr", "codegen", "egc"]
MARK = re.compile(r"(<!-- layout -->\n)(.*?)(<!-- /layout -->)", re.S)
WIDTH = 96


def _summary(init: Path) -> str:
    """The first sentence of a package's docstring."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    text = " ".join(doc.split())
    end = re.search(r"\.(\s|$)", text)
    return text[: end.start()] if end else text


def _packages() -> list[Path]:
    found = []
    for layer in LAYERS:
        found += sorted(p.parent for p in (ROOT / layer).rglob("__init__.py"))
    return found


def layout() -> str:
    """The layout block: per package, `folder/  summary` then its modules."""
    lines = ["```text"]
    for package in _packages():
        folder = f"{package.relative_to(ROOT)}/"
        modules = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")
        lines += textwrap.wrap(
            _summary(package / "__init__.py"),
            WIDTH,
            initial_indent=f"{folder}  ",
            subsequent_indent="    ",
        )
        if modules:
            lines += textwrap.wrap(
                ", ".join(modules), WIDTH, initial_indent="    ", subsequent_indent="    "
            )
    lines.append("```")
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    return MARK.sub(lambda m: m.group(1) + layout() + m.group(3), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite docs/architecture.md")
    args = parser.parse_args()
    if args.write:
        page = ROOT / "docs" / "architecture.md"
        page.write_text(rewrite(page.read_text()))
    else:
        print(layout(), end="")


if __name__ == "__main__":
    main()
