"""Saved executables that are damaged, edited or from elsewhere (issue #36): every member
is checked against its digest, program.json against the graph, and a signature against
trusted keys, before anything is used; each failure is one CodegenError naming the file
and the member, never a raw exception or a crash. The reproductions of
`../shared/repro/reliability-3/artifact_*.py` are here."""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import codegen
from egc.fuzz.artifacts import fix_digests as with_fixed_digests
from egraph_ir import models
from egraph_ir.errors import CodegenError


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trust") / "cnn.egc"
    codegen.build(models.cnn()).save(str(path))
    return path


def members_of(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def rezip(out: Path, parts: dict[str, bytes], fix_digests: bool) -> Path:
    """The members again (valid zip CRCs); with `fix_digests` the manifest's digests are
    recomputed, as a crafted file would do."""
    if fix_digests:
        parts = with_fixed_digests(parts)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    return out


def edit_json(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes]:
    def apply(blob: bytes) -> bytes:
        data = json.loads(blob)
        change(data)
        return json.dumps(data).encode()

    return apply


def small_constant(_: bytes) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros((1,), "float32"))
    return buf.getvalue()


def first_constant(parts: dict[str, bytes]) -> str:
    return sorted(n for n in parts if n.startswith("constants/"))[0]


EDITS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "a key missing": ("program.json", edit_json("p", lambda d: d.pop("slot_of"))),
    "an empty schedule": ("program.json", edit_json("p", lambda d: d.update(schedule=[]))),
    "an offset of 2**40": (
        "program.json",
        edit_json("p", lambda d: d["arena_slots"][0].__setitem__(2, 2**40)),
    ),
    "a node id out of order": (
        "program.json",
        edit_json("p", lambda d: d["nodes"][1].__setitem__("id", 7)),
    ),
    "a million threads": (
        "manifest.json",
        edit_json("m", lambda d: d["options"].update(threads=10**6)),
    ),
    "threads as a string": (
        "manifest.json",
        edit_json("m", lambda d: d["options"].update(threads="2")),
    ),
    "program.json not JSON": ("program.json", lambda b: b[: len(b) // 2]),
}


CASES = [
    (case, fix)
    for case in sorted(EDITS)
    for fix in (False, True)
    if fix or EDITS[case][0] != "manifest.json"  # the manifest holds the digests itself
]


@pytest.mark.parametrize(("case", "fix_digests"), CASES)
def test_an_edited_file_is_one_clean_error(
    saved: Path, tmp_path: Path, case: str, fix_digests: bool
) -> None:
    """Without fixed digests the digest check names the member; with them (a crafted
    file) the schema check of program.json or the manifest's thread count does."""
    member, change = EDITS[case]
    parts = members_of(saved)
    parts[member] = change(parts[member])
    with pytest.raises(CodegenError, match=re.escape(str(tmp_path))):
        codegen.load(rezip(tmp_path / "edited.egc", parts, fix_digests))


@pytest.mark.parametrize("fix_digests", [False, True])
def test_a_constant_of_the_wrong_shape_never_runs(
    saved: Path, tmp_path: Path, fix_digests: bool
) -> None:
    """It used to load and read out of bounds (outputs near 1e19)."""
    parts = members_of(saved)
    name = first_constant(parts)
    parts[name] = small_constant(parts[name])
    message = "does not match its digest" if not fix_digests else "the graph says"
    with pytest.raises(CodegenError, match=message):
        codegen.load(rezip(tmp_path / "const.egc", parts, fix_digests))


def test_damaged_members_are_named(saved: Path, tmp_path: Path) -> None:
    """Truncated object code (a SIGSEGV in LLVM before), a flipped byte inside deflated data
    (a raw zlib.error before), an extra member."""
    parts = members_of(saved)
    truncated = {**parts, "code/0.o": parts["code/0.o"][: len(parts["code/0.o"]) // 2]}
    with pytest.raises(CodegenError, match=r"member code/0\.o does not match its digest"):
        codegen.load(rezip(tmp_path / "code.egc", truncated, fix_digests=False))
    extra = {**parts, "constants/999.npy": parts[first_constant(parts)]}
    with pytest.raises(CodegenError, match="members not as listed"):
        codegen.load(rezip(tmp_path / "extra.egc", extra, fix_digests=False))
    data = bytearray(saved.read_bytes())
    info = zipfile.ZipFile(saved).getinfo("source.ll")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for offset in range(0, 64, 4):  # every flip is an error naming a member, none is raw
        flipped = bytearray(data)
        flipped[start + offset] ^= 0xFF
        bad = tmp_path / "flipped.egc"
        bad.write_bytes(bytes(flipped))
        with pytest.raises(CodegenError, match=r"source\.ll"):
            codegen.load(bad)


def test_a_signed_file_loads_only_with_a_trusted_key(tmp_path: Path) -> None:
    exe = codegen.build(models.mlp())
    key, other = codegen.new_signing_key(), codegen.new_signing_key()
    signed, unsigned = tmp_path / "signed.egc", tmp_path / "unsigned.egc"
    exe.save(str(signed), key=key)
    exe.save(str(unsigned))
    x = models.example_inputs("mlp")
    loaded = codegen.load(signed, trusted_keys=[codegen.public_key(key)])
    np.testing.assert_array_equal(loaded(**x), exe(**x))
    with pytest.raises(CodegenError, match="not from a trusted key"):
        codegen.load(signed, trusted_keys=[codegen.public_key(other)])
    with pytest.raises(CodegenError, match="not signed"):
        codegen.load(unsigned, trusted_keys=[codegen.public_key(key)])
    parts = members_of(signed)  # code edited and digests recomputed: the signature fails
    parts["code/0.o"] = parts["code/0.o"][:-1] + b"\x00"
    with pytest.raises(CodegenError, match="not from a trusted key"):
        codegen.load(rezip(tmp_path / "t.egc", parts, True), trusted_keys=[codegen.public_key(key)])
    with pytest.raises(CodegenError, match="Ed25519 private key"):
        exe.save(str(tmp_path / "x.egc"), key="secret")


def test_a_saved_thread_count_never_exceeds_the_cores(saved: Path, tmp_path: Path) -> None:
    parts = members_of(saved)
    manifest = json.loads(parts["manifest.json"])
    manifest["options"]["threads"] = 512
    parts["manifest.json"] = json.dumps(manifest).encode()
    exe = codegen.load(rezip(tmp_path / "many.egc", parts, True))
    from codegen.options import default_threads

    assert exe.options.threads <= default_threads()
    out = exe(**models.example_inputs("cnn"))
    assert np.isfinite(np.asarray(out)).all()
