"""Every `*.py` path that a docstring, a comment or a doc page names exists, so the docs
cannot point at a file that moved. A path with a folder resolves from the repository root,
from the naming file's folder or from one of that folder's parents (`llvm/emit.py` from
codegen/lower/); a bare file name is a file of the tree somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.py)\b")
SCANNED = ["egraph_ir", "rules", "passmgr", "codegen", "egc", "benchmarks", "tests"]
# files of other projects the docs cite (TVM's Relay tests), and this test's own examples
EXTERNAL = {
    "tests/python/relay/test_pass_manager.py",
    "tests/python/relay/test_pass_plan_devices.py",
    "test_pass_instrument.py",
    "test_pass_fold_constant.py",
    "test_pass_simplify_inference.py",
    "test_pass_fold_scale_axis.py",
}
SELF_EXAMPLES = {"tests/test_layering.py", "tests/test_doc_paths.py"}


def _files() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for top in SCANNED:
        found += sorted((ROOT / top).rglob("*.py"))
    return [p for p in found if str(p.relative_to(ROOT)) not in SELF_EXAMPLES]


def _exists(name: str, where: Path, every_file: set[str]) -> bool:
    if "/" not in name:
        return name in every_file
    folders = [ROOT, *where.parents]
    return any((folder / name).is_file() for folder in folders if ROOT in (folder, *folder.parents))


def _text(path: Path) -> str:
    """The page; a generated layout block is left out (its docstrings are checked where
    they are written)."""
    text = path.read_text()
    head, _, rest = text.partition("<!-- layout -->")
    block, _, tail = rest.partition("<!-- /layout -->")
    return head + "\n" * block.count("\n") + tail if rest else text


def test_every_named_python_file_exists() -> None:
    every_file = {p.name for top in [*SCANNED, "docs"] for p in (ROOT / top).rglob("*.py")}
    missing = []
    for path in _files():
        for number, line in enumerate(_text(path).splitlines(), 1):
            for match in PATH.finditer(line):
                name = match.group(1)
                if name not in EXTERNAL and not _exists(name, path, every_file):
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "docs name files that do not exist:\n" + "\n".join(missing)
