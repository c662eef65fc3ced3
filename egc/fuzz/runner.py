"""The fuzz runner behind `python -m egc.fuzz --seconds 600 [--out fuzz-failures]`:
every fuzzer in turn (random programs from two generators compiled at opt levels 2 and 3
against the interpreter, malformed IR text, rule files and ONNX models, mutated saved
executables), each case in a watched worker process (a crash or a case over 30 s is
recorded, not fatal); failing cases are shrunk where possible and saved with what went
wrong."""

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

KINDS = ("program", "edges", "program", "edges", "ir-text", "rules", "onnx", "artifact")
CASE_SECONDS = 30.0


def run_case(kind: str, seed: int) -> tuple[str | None, Any, str | None]:
    """(failure or None, the failing input, a label) for one deterministic case. The label
    of a program case says what it covered: "float16/bfloat16" when a value of the program
    has one of those dtypes, "empty" when the generator made no program, else "other"."""
    from . import malformed
    from .edges import HALF_DTYPES, edge_program
    from .programs import differential, random_program, shrink, value_dtypes

    rng = np.random.default_rng(seed)
    if kind == "ir-text":
        return (*malformed.ir_text_case(rng), None)
    if kind == "rules":
        return (*malformed.rule_text_case(rng), None)
    if kind == "onnx":
        return (*malformed.onnx_case(rng), None)
    if kind == "artifact":
        from .artifacts import artifact_case

        return (*artifact_case(rng), None)
    import codegen
    import passmgr as pm

    if kind == "edges":
        case = edge_program(rng)
    else:
        case = random_program(rng, extremes=bool(seed % 2))
    if case is None:
        return None, None, "empty"
    label = "float16/bfloat16" if value_dtypes(case.mod) & set(HALF_DTYPES) else "other"
    opt_level = 2 + (seed // 2) % 2  # both parities of seed meet both levels

    def build(mod: Any) -> Any:
        with pm.PassContext(opt_level=opt_level):
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
        return None, None, label
    small = shrink(case, fails, budget=50)
    return f"opt level {opt_level}: {problem}", small, label


def _worker(jobs: Any, results: Any) -> None:
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    while True:
        job = jobs.get()
        if job is None:
            return
        kind, seed = job
        results.put(("start", kind, seed, None))
        label = None
        try:
            problem, data, label = run_case(kind, seed)
        except Exception:  # the fuzzer's own set-up failed on this case: report it
            problem, data = traceback.format_exc(limit=8), None
        payload = (problem, _portable(data)) if problem else None
        results.put(("done", kind, seed, (payload, label)))


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


def fuzz(
    seconds: float,
    out: Path,
    seed: int = 0,
    quiet: bool = False,
    kinds: tuple[str, ...] = KINDS,
    cases: int | None = None,
) -> Counter[str]:
    """Run the fuzzers of `kinds` in turn for `seconds` (or until `cases` cases ran);
    returns counts of cases and failures by kind, and of program cases by label
    ("edges float16/bfloat16", ...)."""
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown fuzzer {unknown}; known: {', '.join(sorted(set(KINDS)))}")
    ctx = mp.get_context("spawn")
    counts: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    n = seed

    def more() -> bool:
        done = sum(v for k, v in counts.items() if k in KINDS)
        return time.monotonic() < deadline and (cases is None or done < cases)

    while more():
        jobs, results = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=_worker, args=(jobs, results), daemon=True)
        proc.start()
        current: tuple[str, int] | None = None
        started = time.monotonic()
        pending = 0
        while more():
            while pending < 2:
                jobs.put((kinds[n % len(kinds)], n))
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
            payload, label = payload
            if label is not None:
                counts[f"{kind} {label}"] += 1
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


def is_failure(key: str) -> bool:
    """Is this key of fuzz()'s counts a failure (not a case count or a label)?"""
    return key.endswith((" failure", " hang", " crash"))
