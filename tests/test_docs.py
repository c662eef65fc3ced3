"""Every code block of the README and of docs/ runs when pasted alone into a fresh Python
(```python blocks) or shell (```sh blocks), each in a new process with a scratch directory as
its working directory. `make <target>` lines are checked with `make -n` (the targets exist
and say what they would do) rather than run: `make test` inside the test suite would recurse.
The counts the README quotes are checked against the live registries."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(python|sh)\n(.*?)^```", re.S | re.M)
BIN = Path(sys.executable).parent  # the venv's egc and python come first on PATH


def _blocks() -> list[tuple[str, str, str]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text[: m.start()].count("\n") + 1
            out.append((f"{page.name}:{line}", m.group(1), m.group(2)))
    return out


BLOCKS = _blocks()


def _shell(code: str) -> str:
    """The block with `make X` lines dry-run in the project's directory."""
    lines = []
    for line in code.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["make"]:
            line = f"make -n -C {shlex.quote(str(ROOT))} {' '.join(words[1:])} >/dev/null"
        lines.append(line)
    return "set -euo pipefail\n" + "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize(("where", "lang", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_each_block_runs_alone(where: str, lang: str, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["EGC_COST_CACHE"] = str(tmp_path / "costs.json")  # never the user's cache
    env["MPLBACKEND"] = "Agg"
    if lang == "python":
        cmd = [sys.executable, "-c", code]
    else:
        cmd = ["bash", "-c", _shell(code)]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_the_pages_have_blocks_and_the_readme_is_short() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    top = "\n".join(readme.splitlines()[:6])  # the two set-up commands come first
    assert "make demo" in top and "make test" in top
    assert sum(1 for b in BLOCKS if b[0].startswith("README")) >= 3


def test_counts_quoted_in_the_readme_are_the_live_ones() -> None:
    """`<!-- count:NAME -->N<!-- /count -->` marks a generated count (benchmarks/counts.py
    writes them): it must equal what the registries say in a fresh process (tests register
    passes and keys of their own in this one)."""
    script = ROOT / "benchmarks" / "counts.py"
    done = subprocess.run(
        [sys.executable, str(script), "--json"], capture_output=True, text=True, check=True
    )
    live = json.loads(done.stdout)
    text = "\n".join(p.read_text() for p in PAGES)
    quoted = dict(re.findall(r"<!-- count:(\w+) -->([\d,]+)<!-- /count -->", text))
    assert quoted, "no generated counts found"
    for name, value in quoted.items():
        assert int(value.replace(",", "")) == live[name], (name, value, live[name])


def test_the_architecture_layout_is_the_tree() -> None:
    """docs/architecture.md's layout block is what benchmarks/layout.py makes of the tree
    (run it with --write after adding a module or a package)."""
    script = ROOT / "benchmarks" / "layout.py"
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=120
    )
    page = (ROOT / "docs" / "architecture.md").read_text()
    quoted = page.split("<!-- layout -->\n")[1].split("<!-- /layout -->")[0]
    assert quoted == done.stdout, "run: .venv/bin/python benchmarks/layout.py --write"
