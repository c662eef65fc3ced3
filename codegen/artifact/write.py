"""Writing an executable to one file (the format: codegen/artifact/load.py, which reads it).

Kept apart from the reader so that `Executable.save` needs nothing of `codegen.load`.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from egraph_ir.dims import to_literal
from egraph_ir.errors import CodegenError
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType, TupleType, Type

from ..llvm import JitLibrary
from ..llvm.objcompile import init
from ..lower.kinds import ExternalKernel, HostKernel
from ..options import BuildOptions
from ..plan.graph import FieldNode, KernelNode, Node
from ..plan.link import Program, Segment
from .check import MANIFEST, SIGNATURE, digests, sign

FORMAT = 5  # 2: devices (one arena each); 3: memory pools; 4: nodes by kind, device plan;
# 5: a SHA-256 digest of every member in the manifest, an optional signature
SUFFIX = ".egc"


def project_version() -> str:
    try:
        return metadata.version("egraph-compiler")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def host_features() -> set[str]:
    """The CPU features LLVM sees on this machine (e.g. avx2, fma)."""
    init()
    return {name for name, on in llvm.get_host_cpu_features().items() if on}


def save(
    path: str | Path,
    program: Program,
    library: JitLibrary | None,
    options: BuildOptions,
    outputs: tuple[list[Type], list[str]],
    source: str,
    key: Any = None,
) -> None:
    """Write a compiled program to one file (codegen/artifact/load.py says what it holds); the
    file appears whole or not at all. With an Ed25519 private `key` the manifest (which
    holds every member's digest) is signed (codegen/artifact/check.py)."""
    program_json = json.dumps(_program_json(program, outputs))
    members: dict[str, bytes] = {"program.json": program_json.encode()}
    for slot, array in program.constants:
        members[f"constants/{slot}.npy"] = _npy(path, array)
    for k, data in enumerate(library.objects if library is not None else []):
        members[f"code/{k}.o"] = data
    members["source.ll"] = source.encode()
    manifest = _manifest(options, members, blas=program.uses_blas)
    write_archive(path, manifest, members, key)


def save_symbolic(
    path: str | Path,
    module_text: str,
    specializations: list[tuple[dict[str, int], bytes]],
    options: BuildOptions,
    key: Any = None,
) -> None:
    """Write a program with size variables (codegen/symbolic.py): its IR as text, to
    compile other sizes after loading, and each specialisation compiled so far as a saved
    executable of its own (members symbolic/<k>.egc, their sizes in symbolic/sizes.json)."""
    members: dict[str, bytes] = {"symbolic/module.txt": module_text.encode()}
    members["symbolic/sizes.json"] = json.dumps([sizes for sizes, _ in specializations]).encode()
    for k, (_, blob) in enumerate(specializations):
        members[f"symbolic/{k}.egc"] = blob
    manifest = _manifest(options, members, symbolic=True)
    write_archive(path, manifest, members, key)


def _manifest(options: BuildOptions, members: dict[str, bytes], **extra: Any) -> dict[str, Any]:
    """What load checks before it reads anything: the format, the machine the code is
    for, the options (their threads: the count the kernels were split for), the digests."""
    return {
        "format": FORMAT,
        "project_version": project_version(),
        "triple": llvm.get_process_triple(),
        "cpu": llvm.get_host_cpu_name(),
        "features": sorted(host_features()),
        "options": options.to_json(),
        **extra,
        "digests": digests(members),
    }


def write_archive(
    path: str | Path, manifest: dict[str, Any], members: dict[str, bytes], key: Any
) -> None:
    """The manifest (signed with `key` if given) and the members, as one zip file that
    appears whole or not at all."""
    manifest_bytes = json.dumps(manifest, indent=1).encode()
    signature = sign(manifest_bytes, key) if key is not None else None
    target = Path(path)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr(MANIFEST, manifest_bytes)
            if signature is not None:
                zf.writestr(SIGNATURE, signature)
            for name, data in members.items():
                packed = name.endswith((".json", ".o", ".ll", ".txt"))
                zf.writestr(name, data, zipfile.ZIP_DEFLATED if packed else zipfile.ZIP_STORED)
        os.replace(partial, target)  # a failed write leaves the old file as it was
    except OSError as exc:
        raise CodegenError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        partial.unlink(missing_ok=True)


def _npy(path: str | Path, array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    try:
        np.save(buf, array, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CodegenError(f"{path}: cannot write a constant ({exc})") from None
    return buf.getvalue()


def _type_json(t: Type) -> Any:
    if isinstance(t, TensorType):
        return {"shape": list(t.shape), "dtype": t.dtype}
    if isinstance(t, TupleType):
        return {"fields": [_type_json(f) for f in t.fields]}
    raise CodegenError(f"cannot save an output of type {t}")


def _node_json(n: Node) -> dict[str, Any]:
    """A node as saved: its kind (`op`), the common fields and its kind's own."""
    shape = list(n.shape) if n.shape is not None else None
    entry = {"op": n.op, "id": n.id, "name": n.name, "inputs": list(n.inputs), "shape": shape}
    entry["dtype"] = n.dtype
    if isinstance(n, KernelNode):
        entry.update(kind=n.kind, ops=list(n.ops), flops=n.flops, bytes=n.bytes)
        entry["variant"] = n.variant
        entry["sources"] = list(n.sources)
        entry.update(predicted=n.predicted, layout=n.layout)  # what --report shows
    elif isinstance(n, FieldNode):
        entry["index"] = n.index
    return entry  # a param's value is a constant file, a kernel's code an object file


def _program_json(program: Program, outputs: tuple[list[Type], list[str]]) -> dict[str, Any]:
    output_types, output_names = outputs
    graph = program.graph
    nodes = []
    host: dict[str, str] = {}
    external: dict[str, str] = {}
    for n in graph.nodes:
        nodes.append(_node_json(n))
        kernel = n.kernel if isinstance(n, KernelNode) else None
        if isinstance(kernel, HostKernel):
            host[str(n.id)] = str(IRModule({"main": kernel.function}))
        elif isinstance(kernel, ExternalKernel):
            external[str(n.id)] = str(IRModule({"main": kernel.function}))
    plan = program.plan
    return {
        "nodes": nodes,
        "inputs": [n.id for n in graph.inputs],
        "outputs": graph.outputs,
        "tuple_output": graph.tuple_output,
        "output_tree": graph.output_tree,
        "plan": {
            "offsets": {str(k): v for k, v in plan.offsets.items()},
            "bytes": plan.bytes,
            "naive": plan.naive,
            "lower_bound": plan.lower_bound,
            "method": plan.method,
            "arena_of": {str(k): v for k, v in plan.arena_of.items()},
            "arena_bytes": plan.arena_bytes,
            "arena_names": plan.arena_names,
            "arena_device": plan.arena_device,
            "device_names": plan.device_names,
        },
        "devices": [
            [d.device_type, d.device_id, d.target, d.memory_scope] for d in program.devices.devices
        ],
        "device_of": list(program.devices.device),
        "copy_source": {str(k): v for k, v in program.devices.source.items()},
        "slot_device": {str(k): v for k, v in program.slot_device.items()},
        "slot_count": program.slot_count,
        "slot_of": {str(k): v for k, v in program.slot_of.items()},
        "constant_slots": [slot for slot, _ in program.constants],
        "constant_types": [[list(a.shape), str(a.dtype)] for _, a in program.constants],
        "arena_slots": program.arena_slots,
        "arena_keys": program.arena_keys,
        "schedule": [
            {"segment": s.index, "nodes": s.nodes} if isinstance(s, Segment) else s
            for s in program.schedule
        ],
        "parallel": program.parallel,
        "uses_blas": program.uses_blas,
        "sizes": dict(zip(program.size_names, program.sizes, strict=True)),
        "symbolic_shapes": {  # built for every size: the shapes that name sizes
            str(k): [d if isinstance(d, int) else to_literal(d) for d in shape]
            for k, shape in program.symbolic_shapes.items()
        },
        "host_steps": host,
        "external_steps": external,
        "output_types": [_type_json(t) for t in output_types],
        "output_names": output_names,
    }
