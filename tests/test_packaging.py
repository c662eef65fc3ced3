"""The project as a user installs it: the wheel carries every data file and runs the BYOC
and compile examples from a fresh virtual environment; optional dependencies missing give
a message naming the extra."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("egraph_ir", "rules", "passmgr", "codegen", "egc")


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _data_files() -> list[str]:
    """Every file of the packages that is not Python source: what the wheel must carry."""
    return sorted(
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
    )


def test_package_data_covers_every_data_file() -> None:
    """pyproject's package-data globs match every non-Python file of the packages (the
    wheel once shipped without rules/builtin/blas.patterns)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = meta["tool"]["setuptools"]["package-data"]
    missing = [
        f
        for f in _data_files()
        if not any(Path(f).match(f"{package}/{g}") for package, gs in globs.items() for g in gs)
    ]
    assert _data_files() and missing == []
    project = meta["project"]
    assert "Operating System :: POSIX :: Linux" in project["classifiers"]
    assert project["requires-python"] == ">=3.12" and project["license"]
    assert {"onnxruntime", "testing", "all"} <= set(project["optional-dependencies"])
    core = " ".join(project["dependencies"])
    assert "hypothesis" not in core and "onnxruntime" not in core  # extras, not requirements


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_examples(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    leftover = not (ROOT / "build").exists()  # setuptools builds in the source tree
    try:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
              str(ROOT)], ROOT)  # fmt: skip
    finally:
        if leftover:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    (wheel,) = wheels.glob("egraph_compiler-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert all(f in names for f in _data_files()), "a data file is missing from the wheel"
    fresh = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], tmp_path)
    python = fresh / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
          str(wheel)], tmp_path)  # fmt: skip
    # the dependencies come from this venv's site-packages (no network in a test); that
    # folder's .pth files (this checkout's editable install) are not read through a .pth
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(python), "-c", purelib], tmp_path).strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PATH": f"{fresh / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    where = _run([str(python), "-c", "import rules, codegen; print(rules.__file__)"], work, env)
    assert where.startswith(str(fresh)), f"not the installed copy: {where}"
    byoc = re.search(r"```python\n(.*?)```", (ROOT / "docs/partitioning.md").read_text(), re.S)
    assert byoc is not None
    out = _run([str(python), "-c", byoc.group(1)], work, env)
    assert "blas" in out
    egc = str(fresh / "bin" / "egc")
    _run([egc, "compile", "cnn", "--emit-onnx", "cnn.onnx"], work, env)
    _run([egc, "compile", "cnn.onnx", "-o", "cnn.egc", "--check"], work, env)
    out = _run([egc, "run", "cnn.egc", "--random", "--repeats", "3", "--json"], work, env)
    assert '"latency"' in out


def test_a_missing_extra_names_the_pip_extra(tmp_path: Path) -> None:
    """Without hypothesis or onnxruntime the compiler still compiles and runs; what needs
    them says which extra to install."""
    code = (
        "import sys\n"
        "sys.modules['hypothesis'] = None\n"
        "sys.modules['onnxruntime'] = None\n"
        "import codegen, rules\n"
        "from egraph_ir import models\n"
        "exe = codegen.build(models.mlp())\n"
        "print(exe.run(**models.example_inputs('mlp')).shape)\n"
        "try:\n"
        "    rules.check_soundness\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = _run([sys.executable, "-c", code], tmp_path)
    assert "(64, 10)" in out and "pip install 'egraph-compiler[testing]'" in out
