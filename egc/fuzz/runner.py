"""The fuzz runner behind `python -m egc.fuzz --seconds 600 [--out fuzz-failures]`:
every fuzzer in turn (random programs compiled against the interpreter, malformed IR text,
rule files and ONNX models, mutated saved executables), each case in a watched worker
process (a crash or a case over 30 s is recorded, not fatal); failing cases are shrunk
where possible and saved with what went wrong."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("program", "program", "program", "ir-text", "rules", "onnx", "artifact")
CASE_SECONDS = 30.0


def run_case(kind: str, seed: int) -> tuple[str | None, Any]:
    """(failure or None, the failing input) for one deterministic case."""
    from . import malformed
    from .programs import differential, random_program, shrink

    rng = np.random.default_rng(seed)
    if kind == "ir-text":
        return malformed.ir_text_case(rng)
    if kind == "rules":
        return malformed.rule_text_case(rng)
    if kind == "onnx":
        return malformed.onnx_case(rng)
    if kind == "artifact":
        from .artifacts import artifact_case

        return artifact_case(rng)
    import codegen
    import passmgr as pm

    case = random_program(rng, extremes=bool(seed % 2))
    if case is None:
        return None, None

    def build(mod: Any) -> Any:
        with pm.PassContext(opt_level=3):
            return codegen.build(mod)

    def fails(c: Any) -> bool:
        return differential(c, build) is not None

    try:
        problem = differential(case, build)
    except Exception:
        problem = traceback.format_exc(limit=8)

        def fails(c: Any) -> bool:
            try:
                differential(c, build)
            except Exception:
                return True
            return False

    if problem is None:
        return None, None
    small = shrink(case, fails, budget=50)
    return problem, small


def _worker(jobs: Any, results: Any) -> None:
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    while True:
        job = jobs.get()
        if job is None:
            return
        kind, seed = job
        results.put(("start", kind, seed, None))
        try:
            problem, data = run_case(kind, seed)
        except Exception:  # the fuzzer's own set-up failed on this case: report it
            problem, data = traceback.format_exc(limit=8), None
        results.put(("done", kind, seed, (problem, _portable(data)) if problem else None))


def _portable(data: Any) -> Any:
    if data is None or isinstance(data, str | bytes):
        return data
    return {"ir": data.mod.astext(), "inputs": dict(data.inputs)}


def _save(out: Path, kind: str, seed: int, problem: str, data: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{kind}-{seed}"
    stem.with_suffix(".txt").write_text(f"{kind} seed {seed}\n{problem}\n")
    if isinstance(data, str):
        stem.with_suffix(".input").write_text(data)
    elif isinstance(data, bytes):
        stem.with_suffix(".onnx").write_bytes(data)
    elif isinstance(data, dict):
        stem.with_suffix(".ir").write_text(data["ir"])
        np.savez(stem.with_suffix(".npz"), **data["inputs"])


def fuzz(seconds: float, out: Path, seed: int = 0, quiet: bool = False) -> Counter[str]:
    """Run the fuzzers for `seconds`; returns counts of cases and failures by kind."""
    ctx = mp.get_context("spawn")
    counts: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    n = seed
    while time.monotonic() < deadline:
        jobs, results = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=_worker, args=(jobs, results), daemon=True)
        proc.start()
        current: tuple[str, int] | None = None
        started = time.monotonic()
        pending = 0
        while time.monotonic() < deadline:
            while pending < 2:
                jobs.put((KINDS[n % len(KINDS)], n))
                n += 1
                pending += 1
            try:
                msg, kind, s, payload = results.get(timeout=1.0)
            except queue.Empty:  # nothing yet: a hang, a crash, or a slow case
                if current and time.monotonic() - started > CASE_SECONDS + 60 * (
                    counts["started"] < 3
                ):
                    counts[f"{current[0]} hang"] += 1
                    _save(out, current[0], current[1], "hang: over the per-case limit", None)
                    proc.kill()
                    break
                if not proc.is_alive():
                    if current is None:
                        message = f"the fuzz worker exited ({proc.exitcode}) before a case"
                        raise RuntimeError(message) from None
                    counts[f"{current[0]} crash"] += 1
                    _save(out, current[0], current[1], f"crash: exit code {proc.exitcode}", None)
                    break
                continue
            if msg == "start":
                current, started = (kind, s), time.monotonic()
                counts["started"] += 1
                continue
            pending -= 1
            counts[kind] += 1
            current = None
            if payload is not None:
                counts[f"{kind} failure"] += 1
                _save(out, kind, s, *payload)
                if not quiet:
                    print(f"{kind} seed {s}: {payload[0].splitlines()[-1][:160]}", flush=True)
        jobs.put(None)
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    del counts["started"]
    return counts
