"""What `codegen.load` checks before it uses anything in a saved file.

Trust model: the SHA-256 digest of every member, written in the manifest, catches damage
(a flipped byte, a truncated or swapped member) before any member is parsed; a schema check
of `program.json` against the graph catches a file that is consistent but wrong (constants
of the wrong shape, offsets outside the arena, an empty schedule, absurd thread counts).
Neither stops a deliberate edit that recomputes the digests: native code runs what it
contains, so a file from elsewhere is trusted only through an Ed25519 signature over the
manifest (`save(path, key=...)`, `load(path, trusted_keys=...)`, `cryptography` library).
"""

from __future__ import annotations

import hashlib
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError

from ..options import MAX_THREADS

MANIFEST, SIGNATURE = "manifest.json", "signature"
NODE_KINDS = ("input", "param", "kernel", "alias", "field")


def digests(members: dict[str, bytes]) -> dict[str, str]:
    """SHA-256 of each member, by name."""
    return {name: hashlib.sha256(data).hexdigest() for name, data in members.items()}


def read_members(path: str | Path, zf: zipfile.ZipFile, manifest: Any) -> dict[str, bytes]:
    """Every member but the manifest and signature, each checked against the manifest's
    digests (a member missing, added or changed is an error naming it)."""
    listed = manifest.get("digests") if isinstance(manifest, dict) else None
    if not isinstance(listed, dict):
        raise CodegenError(f"{path}: damaged or incomplete (manifest.json has no digests)")
    names = set(zf.namelist()) - {MANIFEST, SIGNATURE}
    if names != set(listed):
        odd = sorted(names ^ set(listed))
        raise CodegenError(f"{path}: damaged or incomplete (members not as listed: {odd[:5]})")
    members = {}
    for name in sorted(names):
        data = read_member(path, zf, name)
        if hashlib.sha256(data).hexdigest() != listed[name]:
            raise CodegenError(f"{path}: damaged: member {name} does not match its digest")
        members[name] = data
    return members


def read_member(path: str | Path, zf: zipfile.ZipFile, name: str) -> bytes:
    try:
        return zf.read(name)
    except KeyError:
        raise CodegenError(f"{path}: damaged or incomplete (no member {name})") from None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as exc:
        raise CodegenError(f"{path}: damaged: member {name} cannot be read ({exc})") from None


# ---------------------------------------------------------------- signatures
def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # pragma: no cover - the test extra installs it
        raise CodegenError(
            "signing needs the cryptography package: pip install 'egraph-compiler[sign]'"
        ) from None
    return ed25519


def new_signing_key() -> Any:
    """A fresh Ed25519 private key (`cryptography`'s object); `public_key(key)` is what
    a loader trusts."""
    return _ed25519().Ed25519PrivateKey.generate()


def public_key(key: Any) -> bytes:
    """The raw 32-byte public key of a private key (what `trusted_keys` holds)."""
    from cryptography.hazmat.primitives import serialization

    raw = serialization.Encoding.Raw
    return key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)


def sign(manifest_bytes: bytes, key: Any) -> bytes:
    if not isinstance(key, _ed25519().Ed25519PrivateKey):
        raise CodegenError(f"key must be an Ed25519 private key, got {type(key).__name__}")
    return key.sign(manifest_bytes)


def check_signature(
    path: str | Path, zf: zipfile.ZipFile, manifest_bytes: bytes, trusted: list[Any]
) -> None:
    """The manifest (which holds every member's digest) signed by one of `trusted`
    (raw 32-byte public keys or `cryptography` public keys)."""
    from cryptography.exceptions import InvalidSignature

    ed25519 = _ed25519()
    if SIGNATURE not in zf.namelist():
        raise CodegenError(f"{path}: not signed, and a signature from a trusted key is required")
    signature = read_member(path, zf, SIGNATURE)
    for key in trusted:
        if isinstance(key, bytes | bytearray):
            try:
                key = ed25519.Ed25519PublicKey.from_public_bytes(bytes(key))
            except ValueError:
                raise CodegenError("a trusted key is 32 raw Ed25519 public-key bytes") from None
        try:
            key.verify(signature, manifest_bytes)
            return
        except InvalidSignature:
            continue
    raise CodegenError(f"{path}: the signature is not from a trusted key")


# ---------------------------------------------------------------- program.json
def check_program(
    path: str | Path, data: Any, constants: dict[int, np.ndarray], objects: int
) -> None:
    """The structure load relies on: keys and types, node ids in order with earlier inputs,
    every constant the shape and dtype of its node, every arena range inside its arena, a
    schedule that names real nodes. Raises CodegenError naming the first problem."""
    try:
        _check_program(data, constants, objects)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, AssertionError) as exc:
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise CodegenError(f"{path}: damaged or incomplete program.json ({what})") from None


def _check_program(data: dict[str, Any], constants: dict[int, np.ndarray], objects: int) -> None:
    nodes = data["nodes"]
    assert isinstance(nodes, list) and nodes, "no nodes"
    for i, d in enumerate(nodes):
        assert d["id"] == i, f"node {i} has id {d['id']}"
        assert isinstance(d["name"], str) and d["op"] in NODE_KINDS, f"node {i}"
        assert isinstance(d["inputs"], list), f"node {i} inputs"
        if d["op"] == "kernel":
            assert isinstance(d["kind"], str) and all(isinstance(o, str) for o in d["ops"])
            assert all(isinstance(d[k], int | float) for k in ("flops", "bytes")), f"node {i}"
            assert isinstance(d.get("variant", ""), str), f"node {i} variant"
            sources = d.get("sources", [])
            assert isinstance(sources, list), f"node {i} sources"
            assert all(isinstance(s, str) for s in sources), f"node {i} sources"
            assert isinstance(d.get("predicted", 0.0), int | float), f"node {i} predicted"
            assert isinstance(d.get("layout", ""), str), f"node {i} layout"
        if d["op"] == "field":
            assert _is_int(d["index"]) and d["index"] >= 0, f"node {i} index"
        if d["dtype"] is not None:
            np.dtype(d["dtype"])  # a TypeError for anything but a dtype name
            assert isinstance(d["dtype"], str), f"node {i} dtype"
        shape = d["shape"]
        assert shape is None or all(_is_int(n) and n >= 0 for n in shape), f"node {i} shape"
        assert all(isinstance(k, int) and 0 <= k < i for k in d["inputs"]), f"node {i} inputs"
    assert all(_is_int(v) for v in data["slot_of"].values()), "slot_of"
    assert all(_is_int(v) for v in data["constant_slots"]), "constant_slots"
    listed = data["constant_slots"]
    assert len(set(listed)) == len(listed) and set(listed) == set(constants), "constant slots"
    slot_of = {int(k): v for k, v in data["slot_of"].items()}
    roots = _storage_roots(nodes)
    _check_slot_sharing(roots, slot_of)
    types = data["constant_types"]  # what the code was compiled to read
    assert len(types) == len(data["constant_slots"]), "constant_types"
    for slot, (shape, dtype) in zip(data["constant_slots"], types, strict=True):
        value = constants[int(slot)]
        assert (value.shape, value.dtype) == (tuple(shape), np.dtype(dtype)), (
            f"constant {slot} is {value.shape} {value.dtype}, the graph says {tuple(shape)} {dtype}"
        )
    for d in nodes:
        if d["op"] == "param":
            value = constants[slot_of[d["id"]]]
            want = (tuple(d["shape"]), np.dtype(d["dtype"]))
            assert (value.shape, value.dtype) == want, (
                f"constant of node {d['id']} is {value.shape} {value.dtype}, the graph says "
                f"{want[0]} {want[1]}"
            )
    arena_bytes = [int(b) for b in data["plan"]["arena_bytes"]]
    for key, offset in data["plan"]["offsets"].items():  # negative keys: scratch buffers
        size = _node_bytes(nodes[int(key)]) if int(key) >= 0 else 0
        arena = int(data["plan"]["arena_of"].get(key, 0))
        assert int(offset) >= 0 and int(offset) + size <= arena_bytes[arena], (
            f"node {key} at offset {offset} ({size} bytes) outside arena {arena}"
        )
    _check_arena_slots(data, slot_of, roots)
    _check_outputs(data, len(nodes))
    schedule = data["schedule"]
    assert schedule or not any(d["op"] == "kernel" for d in nodes), "empty schedule"
    for position, item in enumerate(schedule):
        ids = item["nodes"] if isinstance(item, dict) else [item]
        assert all(_is_int(k) and 0 <= k < len(nodes) for k in ids), "schedule names no node"
        assert all(nodes[k]["op"] == "kernel" for k in ids), "the schedule runs a non-kernel"
        assert len(set(ids)) == len(ids), "a kernel twice in one segment"
        if isinstance(item, dict):  # segments are numbered by their place in the schedule
            assert item["segment"] == position and objects > 0, f"segment {item['segment']}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _storage_roots(nodes: list[dict[str, Any]]) -> list[int]:
    """Per node, the node whose storage it uses (an alias node's is its source's)."""
    roots: list[int] = []
    for d in nodes:  # inputs come first (checked above), so a source's root is known
        roots.append(roots[d["inputs"][0]] if d["op"] == "alias" else d["id"])
    return roots


def _check_slot_sharing(roots: list[int], slot_of: dict[int, int]) -> None:
    """Two nodes share a slot only when one aliases the other: otherwise a kernel would
    write into another tensor's memory, even into an input array (a crafted slot_of
    crashed the process that way)."""
    owner: dict[int, int] = {}
    for i, root in enumerate(roots):
        if i in slot_of:
            assert slot_of.get(root) == slot_of[i], f"node {i} is not in its source's slot"
            assert owner.setdefault(slot_of[i], root) == root, f"slot {slot_of[i]} shared by {i}"


def _check_arena_slots(data: dict[str, Any], slot_of: dict[int, int], roots: list[int]) -> None:
    """Each arena slot once, none a constant's, each where the plan puts the tensor (node
    or scratch buffer) it holds, each node's slot the one of its planned tensor, and every
    slot below slot_count."""
    plan = data["plan"]
    slots, keys = data["arena_slots"], data["arena_keys"]
    assert len(slots) == len(keys), "arena_keys"
    placed: dict[int, tuple[int, int]] = {}
    for entry, key in zip(slots, keys, strict=True):
        slot, arena, offset = entry
        assert all(_is_int(v) for v in (*entry, key)), f"arena slot entry {entry}"
        assert slot not in placed, f"slot {slot} placed twice"
        placed[slot] = (arena, offset)
        where = (int(plan["arena_of"].get(str(key), 0)), int(plan["offsets"][str(key)]))
        assert (arena, offset) == where, f"slot {slot} is not where the plan puts {key}"
        assert key < 0 or slot_of.get(key) == slot, f"node {key} is not in slot {slot}"
    constants = {int(s) for s in data["constant_slots"]}
    assert not placed.keys() & constants, "a constant in the arena"
    scratch = {slot for (slot, _, _), key in zip(slots, keys, strict=True) if key < 0}
    nodes = data["nodes"]
    for i, slot in slot_of.items():  # a node writes only its own memory; params are read
        assert slot not in scratch, f"node {i} in a scratch slot"
        assert (slot in constants) == (nodes[roots[i]]["op"] == "param"), f"node {i}'s slot"
    count = int(data["slot_count"])
    used = [*slot_of.values(), *placed, *constants]
    assert all(0 <= s < count for s in used), "a slot beyond slot_count"
    assert count <= len(used) + 1, f"slot_count {count} for {len(used)} slots in use"


def _check_outputs(data: dict[str, Any], count: int) -> None:
    """Output ids name nodes; the output tree's leaves are 0..n-1 once each."""
    outputs = data["outputs"]
    assert isinstance(outputs, list) and outputs, "no outputs"
    assert all(_is_int(k) and 0 <= k < count for k in outputs), "outputs name no such node"
    assert isinstance(data["tuple_output"], bool), "tuple_output"
    types = data["output_types"]
    assert len(types) == len(data["output_names"]) == len(outputs), "output types"
    for k, t in zip(outputs, types, strict=True):
        node = data["nodes"][k]
        if "shape" in t:  # a tensor output is the tensor its node holds
            assert [node["shape"], node["dtype"]] == [t["shape"], t["dtype"]], f"output {k}"
    tree = data.get("output_tree")
    if tree is None:
        return
    leaves, stack = [], [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        else:
            assert _is_int(item), f"output tree leaf {item!r}"
            leaves.append(item)
    assert sorted(leaves) == list(range(len(outputs))), "the output tree does not fit the outputs"


def _node_bytes(d: dict[str, Any]) -> int:
    shape = d.get("shape") or ()
    if d.get("dtype") is None:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(d["dtype"]).itemsize


def check_threads(path: str | Path, threads: Any) -> None:
    """A saved thread count: a positive int up to the one codegen.num_threads allows."""
    if not _is_int(threads) or not 1 <= threads <= MAX_THREADS:
        raise CodegenError(f"{path}: damaged manifest (threads={threads!r})")


# ---------------------------------------------------------------- key files
def write_key_pair(stem: str | Path) -> tuple[Path, Path]:
    """A new key pair as files: STEM.key (the private key, PEM, readable by its owner
    only) to sign with, STEM.pub (the public key, hex) to hand to whoever loads."""
    from cryptography.hazmat.primitives import serialization

    key = new_signing_key()
    private, public = Path(f"{stem}.key"), Path(f"{stem}.pub")
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        public.write_text(public_key(key).hex() + "\n")
    except OSError as exc:
        raise CodegenError(f"{private}: cannot write a key ({exc.strerror or exc})") from None
    return private, public


def read_private_key(path: str | Path) -> Any:
    """A private key written by write_key_pair (`egc keygen`)."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise CodegenError(f"{path}: not a private key file ({exc})") from None
    if not isinstance(key, _ed25519().Ed25519PrivateKey):
        raise CodegenError(f"{path}: not an Ed25519 private key")
    return key


def read_public_key(path: str | Path) -> bytes:
    """A public key written by write_key_pair: 64 hex digits."""
    try:
        raw = bytes.fromhex(Path(path).read_text().strip())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CodegenError(f"{path}: not a public key file ({exc})") from None
    if len(raw) != 32:
        raise CodegenError(f"{path}: a public key is 32 bytes, this file holds {len(raw)}")
    return raw
