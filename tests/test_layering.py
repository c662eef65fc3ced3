"""The architecture of DESIGN.md, checked on the source: the layers import only downwards
(egraph_ir <- rules <- passmgr <- codegen <- egc), dynamic imports included; no two modules
import each other, even through a function-level or type-checking import; a private name
(`_x`) is not imported from another module; only the e-graph bridge imports egglog."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["egraph_ir", "rules", "passmgr", "codegen", "egc"]


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of every layer."""
    out = {}
    for layer in LAYERS:
        for p in (ROOT / layer).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(module: str, path: Path | None = None) -> list[tuple[str, list[str]]]:
    """(imported module, names imported from it) for every import statement of a module,
    wherever it sits (module level, in a function, under TYPE_CHECKING), and for every
    `importlib.import_module("...")` with a literal name."""
    path = path or MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.append((base, [a.name for a in node.names]))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, []))
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_down(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    bad = {
        module: sorted({name.split(".")[0] for name, _ in _imports(module)} & above)
        for module in MODULES
        if module.split(".")[0] == layer
    }
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{layer} imports layers above it: {bad}"


def _dependencies(module: str) -> set[str]:
    """The project's modules (not packages) this one imports, `from pkg import mod` too."""
    deps = set()
    for base, names in _imports(module):
        for candidate in [base, *(f"{base}.{n}" for n in names)]:
            if candidate in MODULES and MODULES[candidate].name != "__init__.py":
                deps.add(candidate)
    deps.discard(module)
    return deps


def test_no_two_modules_import_each_other() -> None:
    """Strongly connected groups of the import graph (Tarjan's algorithm, iteratively)."""
    graph = {m: _dependencies(m) for m in MODULES if MODULES[m].name != "__init__.py"}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    loops = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    loops.append(sorted(group))
    assert not loops, f"modules that import each other: {loops}"


def test_no_private_name_is_imported_from_another_module() -> None:
    bad = [
        f"{module} imports {name} from {base}"
        for module in MODULES
        for base, names in _imports(module)
        if base.split(".")[0] in LAYERS
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not bad, bad


def test_only_the_egraph_bridge_imports_egglog() -> None:
    users = [
        module
        for module in MODULES
        if any(base.split(".")[0] == "egglog" for base, _ in _imports(module))
        and not module.startswith("egraph_ir.egraph")
    ]
    assert users == []


def test_the_checks_see_what_they_must_refuse(tmp_path: Path) -> None:
    """The checker itself: function-level, relative and dynamic imports are all found."""
    fake = tmp_path / "fake.py"
    fake.write_text(
        "import importlib\n"
        "def f():\n"
        "    from egc.cli.main import main\n"
        "    from .build import _Clock\n"
        "    importlib.import_module('egc.job')\n"
    )
    found = _imports("codegen.fake", fake)
    assert ("egc.cli.main", ["main"]) in found and ("egc.job", []) in found
    assert ("codegen.build", ["_Clock"]) in found


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def test_modules_and_functions_stay_small() -> None:
    """A module past 500 lines or a function past 80 gets split by job (ruff's C901
    bounds branching the same way)."""
    too_long = []
    for module, path in MODULES.items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{module}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{module}.{node.name}: {length} lines")
    assert not too_long, too_long


def _prefix_families(names: list[str]) -> dict[str, list[str]]:
    """Module names of one folder grouped by the word before their first underscore."""
    families: dict[str, list[str]] = {}
    for name in names:
        families.setdefault(name.split("_")[0], []).append(name)
    return {k: sorted(v) for k, v in families.items() if len(v) >= 3}


def test_three_modules_sharing_a_prefix_are_a_package() -> None:
    """House rule (docs/architecture.md): `cli.py`, `cli_args.py`, `cli_run.py` become
    `cli/` with `main.py`, `args.py`, `run.py`; a prefix stands in for a package nowhere."""
    folders: dict[Path, list[str]] = {}
    for path in MODULES.values():
        if path.name != "__init__.py":
            folders.setdefault(path.parent, []).append(path.stem)
    bad = {
        str(folder.relative_to(ROOT)): families
        for folder, names in folders.items()
        if (families := _prefix_families(names))
    }
    assert not bad, f"prefix families that should be packages: {bad}"
    assert _prefix_families(["cli", "cli_args", "cli_run", "jit"]) == {
        "cli": ["cli", "cli_args", "cli_run"]
    }


def test_no_private_module_is_imported_from_outside_its_package() -> None:
    """A module named `_x` is its package's own (egraph_ir.op._common): others use the
    public names (TensorType.size, not op._common.size_of)."""
    bad = []
    for module in MODULES:
        for base, names in _imports(module):
            for candidate in [base, *(f"{base}.{n}" for n in names)]:
                parts = candidate.split(".")
                private = [i for i, p in enumerate(parts) if p.startswith("_") and p != "__init__"]
                if candidate not in MODULES or not private:
                    continue
                owner = ".".join(parts[: private[0]])
                if not module.startswith(owner + ".") and module != owner:
                    bad.append(f"{module} imports {candidate}")
    assert not bad, bad
