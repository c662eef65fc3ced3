"""Mutated saved executables: what `codegen.load` must refuse cleanly or run correctly.

Each case takes a saved executable (a built-in model, built once per worker) and changes it
the ways a damaged or hand-edited file differs: bytes flipped anywhere in the archive, the
archive cut short, two members' contents swapped, a member dropped, or a field of
program.json or manifest.json edited with the digests recomputed (a crafted file: then the
schema checks, not the digests, must catch it). Object code is never edited with fixed
digests: code runs whatever it contains, which only a signature guards against.

A case passes when load raises a CompilerError, or loads and gives the original outputs
(leaf by leaf). A crafted file (digests recomputed) that passes every check may compute
something else (another node as the output): it must only never crash or raise anything
but a CompilerError; a signature is what proves a file unchanged.
Anything else (another exception, different outputs) is a failure; a crash or hang is
recorded by the runner.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from functools import cache
from typing import Any

import numpy as np

MODELS = ("mlp", "cnn")


@cache
def _original(name: str) -> tuple[bytes, dict[str, np.ndarray], Any]:
    import codegen
    from egraph_ir import models

    exe = codegen.build(models.get(name))
    path = os.path.join(tempfile.mkdtemp(), f"{name}.egc")
    exe.save(path)
    inputs = models.example_inputs(name)
    with open(path, "rb") as f:
        return f.read(), inputs, exe.run(**inputs)


def artifact_case(rng: np.random.Generator) -> tuple[str | None, Any]:
    """(failure or None, a description of the mutation)."""
    name = MODELS[int(rng.integers(len(MODELS)))]
    blob, inputs, expected = _original(name)
    mutated, what = _mutate(rng, blob)
    crafted = what.endswith("(digests recomputed)")
    return _outcome(mutated, inputs, None if crafted else expected), f"{name}: {what}"


def _outcome(blob: bytes, inputs: dict[str, np.ndarray], expected: Any) -> str | None:
    """None when load refuses cleanly, or runs and (unless `expected` is None: a crafted
    file may compute something else, which only a signature rules out) agrees."""
    import codegen
    from egraph_ir.compare import leaves, mismatch
    from egraph_ir.errors import CompilerError

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "m.egc")
        with open(path, "wb") as f:
            f.write(blob)
        try:
            exe = codegen.load(path)
            out = exe.run(**inputs)
        except CompilerError:
            return None
        except Exception as exc:  # what the fuzzer is looking for
            return f"raw {type(exc).__name__}: {exc}"
    if expected is None:
        return None
    problem = mismatch(leaves(out), leaves(expected))
    return f"loaded and ran, but {problem}" if problem else None


def _mutate(rng: np.random.Generator, blob: bytes) -> tuple[bytes, str]:
    kind = ("flip", "cut", "swap", "drop", "field", "field")[int(rng.integers(6))]
    if kind == "flip":
        data = bytearray(blob)
        spots = rng.integers(0, len(data), size=int(rng.integers(1, 6)))
        for at in spots:
            data[at] ^= int(rng.integers(1, 256))
        return bytes(data), f"flipped bytes at {sorted(int(s) for s in spots)}"
    if kind == "cut":
        at = int(rng.integers(0, len(blob)))
        return blob[:at], f"cut at {at} of {len(blob)}"
    parts = _members(blob)
    names = sorted(parts)
    if kind == "swap":
        a, b = (names[int(k)] for k in rng.choice(len(names), 2, replace=False))
        parts[a], parts[b] = parts[b], parts[a]
        return _zip(parts), f"swapped {a} and {b}"
    if kind == "drop":
        gone = names[int(rng.integers(len(names)))]
        del parts[gone]
        return _zip(parts), f"dropped {gone}"
    member = "program.json" if rng.random() < 0.75 else "manifest.json"
    data = json.loads(parts[member])
    where = _edit(rng, data)
    parts[member] = json.dumps(data).encode()
    return _zip(fix_digests(parts)), f"{member}: {where} (digests recomputed)"


def _edit(rng: np.random.Generator, data: Any) -> str:
    """Change one value somewhere in a JSON tree; returns its path."""
    path: list[str] = []
    parent, key = None, None
    node = data
    while isinstance(node, dict | list) and node and (parent is None or rng.random() < 0.7):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = keys[int(rng.integers(len(keys)))]
        parent, node = node, node[key]
        path.append(str(key))
    if parent is None:
        return "nothing"
    choices: list[Any] = [None, -1, 0, 2**40, "x", [], {}, 1.5, True, 10**6]
    if isinstance(node, int) and not isinstance(node, bool):
        choices += [node + 1, node - 1, -node]
    parent[key] = choices[int(rng.integers(len(choices)))]  # type: ignore[index]
    return "/".join(path) + f" = {parent[key]!r}"  # type: ignore[index]


def _members(blob: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _zip(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    return out.getvalue()


def fix_digests(parts: dict[str, bytes]) -> dict[str, bytes]:
    """The members with the manifest's digests recomputed, as a crafted file would have
    them (the manifest is kept as it is when it is not a JSON object)."""
    from codegen.artifact.check import MANIFEST, SIGNATURE, digests

    manifest = json.loads(parts[MANIFEST])
    if isinstance(manifest, dict):
        manifest["digests"] = digests(
            {n: d for n, d in parts.items() if n not in (MANIFEST, SIGNATURE)}
        )
        parts = {**parts, MANIFEST: json.dumps(manifest).encode()}
    return parts
