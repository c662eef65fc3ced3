"""The README's Python examples run as written (in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3
    namespace: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README block {i}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "['DeadCodeElimination', 'ExpOfLog', 'Sequential']" in out
    assert "multiply(%x, 6.0f)" in out
    assert "{'loops': 1}" in out
