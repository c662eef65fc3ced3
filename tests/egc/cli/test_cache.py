"""`egc compile` as a user meets it: compile only unless asked, --check that fails on a
mismatch, the compile cache, help, logging and listings (each through a real process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EGC = Path(sys.executable).with_name("egc")


def egc(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """The installed command in a fresh process, with a cache folder of the test's own."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [str(EGC), *args], capture_output=True, text=True, cwd=cwd, timeout=300, env=env
    )


def test_a_second_compile_comes_from_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = egc("compile", "cnn", "-o", "a.egc", "--json", cwd=tmp_path, cache=cache)
    assert first.returncode == 0, first.stderr
    assert "cache" not in json.loads(first.stdout)
    again = egc("compile", "cnn", "-o", "b.egc", cwd=tmp_path, cache=cache)
    assert again.returncode == 0, again.stderr
    assert "reused in" in again.stdout and "optimising" not in again.stderr
    assert (tmp_path / "a.egc").read_bytes() == (tmp_path / "b.egc").read_bytes()
    run = egc("run", "b.egc", "--random", cwd=tmp_path, cache=cache)
    assert run.returncode == 0, run.stderr
    # a run on a hit loads the cached executable: no compile, the check still done
    checked = egc("compile", "cnn", "--check", "--json", cwd=tmp_path, cache=cache)
    report = json.loads(checked.stdout)
    assert report["cache"] == "hit" and report["check_original"]["within_tolerance"]
    # anything the program depends on is in the key: another opt level compiles again
    other = egc("compile", "cnn", "--opt-level", "3", "--json", cwd=tmp_path, cache=cache)
    assert "cache" not in json.loads(other.stdout)
    fresh = egc("compile", "cnn", "--no-cache", "--json", cwd=tmp_path, cache=cache)
    assert "cache" not in json.loads(fresh.stdout)
    info = egc("cache", "info", cwd=tmp_path, cache=cache)
    assert "2 compiled model(s)" in info.stdout and str(cache) in info.stdout
    cleared = egc("cache", "clear", cwd=tmp_path, cache=cache)
    assert "removed 2 compiled model(s)" in cleared.stdout
    assert "0 compiled model(s)" in egc("cache", "info", cwd=tmp_path, cache=cache).stdout


def test_the_cache_is_bounded_least_recently_used_first(tmp_path: Path, monkeypatch) -> None:
    from egc import compile_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    artifact = tmp_path / "x.egc"
    artifact.write_bytes(b"x" * 1000)
    for key in ("a", "b", "c"):
        compile_cache.store(key, artifact, {"ok": True}, "text")
        os.utime(compile_cache.compiled_dir() / f"{key}.egc", (1e9, 1e9 + ord(key)))
    assert compile_cache.lookup("a") is not None  # used now: the newest
    assert compile_cache.evict(2500) == 1
    assert compile_cache.lookup("b") is None and compile_cache.lookup("a") is not None


def test_compile_only_compiles_and_check_fails_on_a_mismatch(tmp_path: Path) -> None:
    """Without --check nothing runs and nothing says MISMATCH; with it an unsound user
    rule is caught: MISMATCH, result FAILED, exit status 1."""
    unsound = tmp_path / "bad.rules"
    unsound.write_text("rule relu-is-identity [algebraic]\n    relu(?x) => ?x\n")
    cache = tmp_path / "cache"
    quiet = egc("compile", "mlp", "--rules", str(unsound), cwd=tmp_path, cache=cache)
    assert quiet.returncode == 0, quiet.stderr
    assert "running" not in quiet.stderr and "MISMATCH" not in quiet.stdout
    checked = egc("compile", "mlp", "--rules", str(unsound), "--check", cwd=tmp_path, cache=cache)
    assert checked.returncode == 1
    assert "MISMATCH" in checked.stdout and "result: FAILED" in checked.stdout


def test_help_listings_and_logging(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    help_text = egc("--help", cwd=tmp_path, cache=cache).stdout
    assert "examples:" in help_text and "exit status:" in help_text and "egc cache" in help_text
    ops = egc("list", "onnx-ops", cwd=tmp_path, cache=cache)
    assert ops.returncode == 0 and "Conv" in ops.stdout and "LSTM" in ops.stdout
    logged = egc("-v", "compile", "mlp", "--no-cache", "-o", "m.egc", cwd=tmp_path, cache=cache)
    assert logged.returncode == 0 and "egc: INFO" in logged.stderr
    run = egc("run", "m.egc", "--random", "--threads", "1", "--json", cwd=tmp_path, cache=cache)
    assert json.loads(run.stdout)["threads"] == 1
    assert egc("--log-level", "loud", "list", "ops", cwd=tmp_path, cache=cache).returncode == 2
