"""The layers of DESIGN.md import only downwards: egraph_ir <- rules <- passmgr <- codegen <- egc."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["egraph_ir", "rules", "passmgr", "codegen", "egc"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_down(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    bad = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & above)
        for p in (ROOT / layer).rglob("*.py")
        if _imports(p) & above
    }
    assert not bad, f"{layer} imports layers above it: {bad}"


def test_only_the_egraph_bridge_imports_egglog() -> None:
    users = [
        str(p.relative_to(ROOT))
        for layer in LAYERS
        for p in (ROOT / layer).rglob("*.py")
        if "egglog" in _imports(p) and "egraph_ir/egraph" not in str(p)
    ]
    assert users == []
