"""The compile cache: `egc compile` of a model it has compiled before is a file copy.

An entry is the saved executable (`Executable.save`) and the compile's report, under the
user cache directory (platformdirs: `$XDG_CACHE_HOME/egraph-compiler/compiled/` on Linux,
beside `egc tune`'s kernel database). The key digests everything the result depends on: the
model file (and its external data), the options that change the program (opt level, rule
files by content, disabled passes, config, shapes, targets), the compiler (version and every
source and rule file), this CPU (/proc/cpuinfo's model and flags) and the kernel database the
lowering reads. A compile that needs the IR (--dot, --emit-onnx, --print-ir-after,
--time-passes) or that times candidates (--place measured) compiles, and only that last one
is not stored. The cache is bounded (EGC_CACHE_MAX_BYTES, default 2 GiB): the least recently
used entries go first.

Light on purpose (standard library and platformdirs): a cache hit must
not import the compiler.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

from .options import CompileRequest, unwritable

FORMAT = 2  # 2: reports written by egc/report.py (CompileReport.to_json)
DEFAULT_MAX_BYTES = 2 << 30
PACKAGES = ("egraph_ir", "rules", "passmgr", "codegen", "egc")


class CacheError(Exception):
    """The cache folder cannot be read or written (a one-line CLI error)."""


def cache_root() -> Path:
    """The project's cache folder, as egraph_ir/cache.py computes it (kept apart so a
    cache hit imports nothing of the compiler; tests/egc/test_job.py checks they agree)."""
    import platformdirs

    return platformdirs.user_cache_path("egraph-compiler")


def compiled_dir() -> Path:
    return cache_root() / "compiled"


def max_bytes() -> int:
    text = os.environ.get("EGC_CACHE_MAX_BYTES", "")
    return int(text) if text.isdigit() else DEFAULT_MAX_BYTES


# ---------------------------------------------------------------- the key
def key_for(request: CompileRequest) -> str | None:
    """The cache key of one `egc compile`; None: not cacheable."""
    if not request.cacheable:
        return None
    model = _model_digest(request.model)
    if model is None:
        return None
    opts = request.options
    config = {k: repr(v) for k, v in sorted(opts.config.items())}
    parts = {
        "format": FORMAT,
        "code": _code_digest(),
        "cpu": _cpu_id(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0,
        "model": model,
        "opt_level": opts.opt_level,
        "rules": [_source_digest(r) for r in opts.rules],
        "disabled": sorted(opts.disabled),
        "config": config,
        "shapes": sorted((k, list(v)) for k, v in opts.shapes.items()),
        "dims": sorted(opts.dims.items()),  # a symbolic program's report and specialisation
        "targets": ",".join(opts.targets) or None,
        "place": opts.place,
        "kernel_db": _kernel_db_digest(opts.config.get("codegen.kernel_db", "auto")),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:40]


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _model_digest(source: str) -> str | None:
    """A model file's bytes and its external data files; a built-in model by name (the code
    digest covers its definition)."""
    path = Path(source)
    if not path.exists():
        return f"builtin:{source}"
    if not path.is_file():
        return None
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if b"location" in data:  # maybe tensors in external files
        for name in _external_data(path):
            tensors = path.parent / name
            digest += ":" + (_file_digest(tensors) if tensors.is_file() else "missing")
    return digest


def _external_data(path: Path) -> list[str]:
    """The files an ONNX model keeps its tensors in (empty when it holds them itself)."""
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # not ONNX, or unreadable: the compile will say so
        return []
    names = set()
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                names.add(entry.value)
    return sorted(names)


def _source_digest(source: str) -> str:
    path = Path(source)
    return _file_digest(path) if path.is_file() else f"builtin:{source}"


@cache
def _code_digest() -> str:
    """The compiler's version: every source, rule and pattern file of its packages (path,
    size, modification time), so an edited checkout never reuses an old compile."""
    h = hashlib.sha256()
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(folder).rglob("*")):
                if path.suffix in (".py", ".rules", ".patterns") and path.is_file():
                    st = path.stat()
                    h.update(f"{path.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


@cache
def _cpu_id() -> str:
    """This CPU: its model name and feature flags from /proc/cpuinfo (Linux, the only
    platform the runtime supports; read in a millisecond where asking LLVM takes 0.1 s)."""
    wanted = ("model name", "flags", "vendor_id", "cpu family", "model\t")
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return "unknown"
    lines = sorted(line for line in first.splitlines() if line.startswith(wanted))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _kernel_db_digest(setting: Any) -> str:
    """The measured kernel choices lowering will read (codegen.kernel_db): a given file,
    or every per-CPU database in the cache for `auto`."""
    if setting == "off":
        return "off"
    paths = sorted(cache_root().glob("kernels-*.json")) if setting == "auto" else [Path(setting)]
    return ",".join(_file_digest(p) for p in paths if p.is_file()) or "none"


# ---------------------------------------------------------------- entries
def lookup(key: str) -> tuple[Path, dict[str, Any]] | None:
    """The cached executable and its stored report, or None."""
    folder = compiled_dir()
    artifact, meta = folder / f"{key}.egc", folder / f"{key}.json"
    try:
        stored = json.loads(meta.read_text())
        if stored.get("format") != FORMAT or not artifact.is_file():
            return None
        now = time.time()
        os.utime(artifact, (now, now))  # recently used: evicted last
    except (OSError, ValueError):
        return None
    return artifact, stored


def store(key: str, artifact: Path, report: dict[str, Any], text: str) -> None:
    """Copy a saved executable and its report into the cache, then keep the cache within
    its size bound. A cache that cannot be written is skipped, never an error."""
    folder = compiled_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        shutil.copyfile(artifact, tmp)
        os.replace(tmp, folder / f"{key}.egc")
        meta = {"format": FORMAT, "stored": time.time(), "report": report, "text": text}
        (folder / f".{key}.json.tmp").write_text(json.dumps(meta, default=str))
        os.replace(folder / f".{key}.json.tmp", folder / f"{key}.json")
        evict(max_bytes())
    except OSError as exc:
        print(f"egc: warning: compile cache not written ({exc})", file=sys.stderr)


def entries() -> list[tuple[Path, int, float]]:
    """(executable, bytes with its report, last use) per entry, oldest use first."""
    folder = compiled_dir()
    rows = []
    for artifact in folder.glob("*.egc") if folder.is_dir() else []:
        meta = artifact.with_suffix(".json")
        try:
            size = artifact.stat().st_size + (meta.stat().st_size if meta.exists() else 0)
            rows.append((artifact, size, artifact.stat().st_mtime))
        except OSError:
            continue
    return sorted(rows, key=lambda r: r[2])


def evict(limit: int) -> int:
    """Drop least recently used entries until the cache holds at most `limit` bytes; the
    number dropped."""
    rows = entries()
    total = sum(size for _, size, _ in rows)
    dropped = 0
    for artifact, size, _ in rows:
        if total <= limit:
            break
        artifact.unlink(missing_ok=True)
        artifact.with_suffix(".json").unlink(missing_ok=True)
        total -= size
        dropped += 1
    return dropped


def cache_command(action: str) -> int:
    """`egc cache info|clear`."""
    rows = entries()
    total = sum(size for _, size, _ in rows)
    if action == "clear":
        try:
            evict(0)
        except OSError as exc:
            raise CacheError(f"{compiled_dir()}: cannot clear ({exc.strerror or exc})") from None
        print(f"removed {len(rows)} compiled model(s), {total / 2**20:.1f} MiB")
        return 0
    print(f"compile cache: {compiled_dir()}")
    print(f"  {len(rows)} compiled model(s), {total / 2**20:.1f} MiB of {max_bytes() / 2**20:.0f}")
    print("  bound: EGC_CACHE_MAX_BYTES; skip with egc compile --no-cache")
    return 0


# ---------------------------------------------------------------- the fast path
def answer_from_cache(request: CompileRequest) -> int | None:
    """`egc compile` from the cache when nothing asked needs the compiler: the stored report
    printed and the executable copied to -o. None: the compile must run (a miss, or options
    that need the IR, a run or a signature; those hits are served in commands.py)."""
    if request.needs_ir or request.runs:
        return None
    key = key_for(request)
    hit = lookup(key) if key else None
    if hit is None:
        return None
    artifact, stored = hit
    t0 = time.perf_counter()
    output = request.output
    if problem := unwritable(output):
        raise CacheError(problem)
    if output:
        try:
            shutil.copyfile(artifact, output)
        except OSError as exc:
            raise CacheError(f"{output}: cannot write ({exc.strerror or exc})") from None
    report = dict(stored["report"], cache="hit")
    if output:
        report["saved"] = output
    if request.json:
        print(json.dumps(report, indent=2))
        return 0 if report.get("ok", True) else 1
    print(stored["text"])
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(stored.get("stored", 0)))
    print(f"cache: compiled {when}, reused in {1e3 * (time.perf_counter() - t0):.0f} ms")
    if output:
        print(f"wrote {output}")
    return 0 if report.get("ok", True) else 1
