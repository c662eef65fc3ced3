"""Save and load executables: `exe.save(path)` and `codegen.load(path)`.

The file is a zip archive (readable with any zip tool) holding what the runtime needs and
nothing it would have to recompile:

    manifest.json    format and project versions, target triple, CPU name and the CPU
                     features the code was generated for, thread budget
    program.json     the execution graph, memory plan, slot table layout and schedule,
                     input and output types and names, host-kernel functions (IR text)
    constants/N.npy  the constant buffers, by slot (loaded with allow_pickle=False)
    code/K.o         the native code: the object files LLVM made, relocated on load
    source.ll        the LLVM IR, for `get_source()` (compressed)

Loading checks the format version, the target triple and that this CPU has every feature
the code uses, then relocates the object files into a fresh engine: no pass, no lowering,
no LLVM optimisation or code generation runs. Like a shared library, a saved executable is
native code: load only files you trust.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from egraph_ir.device import VirtualDevice
from egraph_ir.errors import CodegenError
from egraph_ir.expr import Function
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.text.parser import parse
from egraph_ir.types import TensorType, TupleType, Type

from . import blas
from .executable import Executable
from .external.host import external_kernel
from .graph import Graph, Node
from .kernels import ExternalKernel, HostKernel
from .llvm import JitLibrary
from .llvm.objcompile import init
from .memory_plan import MemoryPlan
from .program import Program, Segment

FORMAT = 3  # 2: devices (one arena each, copies between them); 3: memory pools
# every Node field but the two the file holds elsewhere: the kernel object (compiled code,
# or the host function's IR text) and a param's value (a constant buffer)
SAVED_NODE_FIELDS = tuple(
    f.name for f in dataclasses.fields(Node) if f.name not in ("kernel", "value")
)
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


def save(exe: Executable, path: str | Path) -> None:
    """Write `exe` to one file (see the module docstring for what it holds)."""
    program = exe.program
    library = exe.library
    manifest = {
        "format": FORMAT,
        "project_version": project_version(),
        "triple": llvm.get_process_triple(),
        "cpu": llvm.get_host_cpu_name(),
        "features": sorted(host_features()),
        "threads": program.threads,
        "blas": program.uses_blas,
    }
    try:
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("manifest.json", json.dumps(manifest, indent=1))
            zf.writestr("program.json", json.dumps(_program_json(exe)), zipfile.ZIP_DEFLATED)
            for slot, array in program.constants:
                buf = io.BytesIO()
                np.save(buf, array, allow_pickle=False)
                zf.writestr(f"constants/{slot}.npy", buf.getvalue())
            for k, data in enumerate(library.objects if library is not None else []):
                zf.writestr(f"code/{k}.o", data, zipfile.ZIP_DEFLATED)
            zf.writestr("source.ll", exe.get_source(), zipfile.ZIP_DEFLATED)
    except OSError as exc:
        raise CodegenError(f"{path}: cannot write ({exc.strerror or exc})") from None


def load(path: str | Path) -> Executable:
    """An executable saved by `Executable.save`, ready to run (nothing is recompiled)."""
    t0 = time.perf_counter()
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise CodegenError(f"{path}: no such file") from None
    except (OSError, zipfile.BadZipFile) as exc:
        raise CodegenError(f"{path}: not a saved executable ({exc})") from None
    with zf:
        try:
            manifest = json.loads(zf.read("manifest.json"))
            _check_manifest(path, manifest)
            data = json.loads(zf.read("program.json"))
            constants = {
                int(Path(name).stem): np.load(io.BytesIO(zf.read(name)), allow_pickle=False)
                for name in zf.namelist()
                if name.startswith("constants/")
            }
            objects = [
                zf.read(f"code/{k}.o")
                for k in range(sum(n.startswith("code/") for n in zf.namelist()))
            ]
            source = zf.read("source.ll").decode()
        except (KeyError, ValueError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
            raise CodegenError(f"{path}: damaged or incomplete ({exc})") from None
    program, types, names = _program_from_json(data, constants, manifest["threads"])
    if manifest.get("blas"):
        blas.register_symbols()
    library = JitLibrary.from_objects(objects) if objects else None
    exe = Executable(program, library, types, names, source)
    exe.compile_seconds = {"load": time.perf_counter() - t0}
    return exe


def _check_manifest(path: str | Path, manifest: dict[str, Any]) -> None:
    if manifest.get("format") != FORMAT:
        raise CodegenError(
            f"{path}: saved in format {manifest.get('format')}, this version reads {FORMAT}; "
            "compile the model again"
        )
    triple = llvm.get_process_triple()
    if manifest.get("triple") != triple:
        raise CodegenError(
            f"{path}: compiled for {manifest.get('triple')}, this machine is {triple}"
        )
    missing = sorted(set(manifest.get("features", ())) - host_features())
    if missing:
        raise CodegenError(
            f"{path}: compiled for a CPU with {', '.join(missing)} "
            f"({manifest.get('cpu')}); this CPU ({llvm.get_host_cpu_name()}) lacks them; "
            "compile the model on this machine"
        )


# ---------------------------------------------------------------- program <-> JSON
def _tree(saved: Any) -> Any:
    """A saved output tree (JSON lists) as tuples again."""
    if saved is None or isinstance(saved, int):
        return saved
    return tuple(_tree(t) for t in saved)


def _type_json(t: Type) -> Any:
    if isinstance(t, TensorType):
        return {"shape": list(t.shape), "dtype": t.dtype}
    if isinstance(t, TupleType):
        return {"fields": [_type_json(f) for f in t.fields]}
    raise CodegenError(f"cannot save an output of type {t}")


def _type_from_json(d: dict[str, Any]) -> Type:
    if "fields" in d:
        return TupleType(tuple(_type_from_json(f) for f in d["fields"]))
    return TensorType(tuple(d["shape"]), d["dtype"])


def _program_json(exe: Executable) -> dict[str, Any]:
    program = exe.program
    graph = program.graph
    nodes = []
    host: dict[str, str] = {}
    external: dict[str, str] = {}
    for n in graph.nodes:
        nodes.append({f: getattr(n, f) for f in SAVED_NODE_FIELDS})
        if isinstance(n.kernel, HostKernel):
            host[str(n.id)] = str(IRModule({"main": n.kernel.function}))
        elif isinstance(n.kernel, ExternalKernel):
            external[str(n.id)] = str(IRModule({"main": n.kernel.function}))
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
        "devices": [[d.device_type, d.device_id, d.target, d.memory_scope] for d in graph.devices],
        "slot_device": {str(k): v for k, v in program.slot_device.items()},
        "slot_count": program.slot_count,
        "slot_of": {str(k): v for k, v in program.slot_of.items()},
        "constant_slots": [slot for slot, _ in program.constants],
        "arena_slots": program.arena_slots,
        "schedule": [
            {"segment": s.index, "nodes": s.nodes} if isinstance(s, Segment) else s
            for s in program.schedule
        ],
        "parallel": program.parallel,
        "uses_blas": program.uses_blas,
        "host_steps": host,
        "external_steps": external,
        "output_types": [_type_json(t) for t in exe.output_types],
        "output_names": exe.output_names,
    }


def _program_from_json(
    data: dict[str, Any], constants: dict[int, np.ndarray], threads: int
) -> tuple[Program, list[Type], list[str]]:
    slot_of = {int(k): v for k, v in data["slot_of"].items()}
    nodes = []
    for d in data["nodes"]:
        n = Node(**{**d, "shape": tuple(d["shape"]) if d["shape"] is not None else None})
        if n.op == "param":
            n.value = constants[slot_of[n.id]]
        nodes.append(n)
    for key, text in data["host_steps"].items():
        fn = infer_type(parse(text))["main"]
        assert isinstance(fn, Function)
        n = nodes[int(key)]
        n.kernel = HostKernel(n.name, n.ops, fn)
    for key, text in data.get("external_steps", {}).items():
        fn = infer_type(parse(text))["main"]
        assert isinstance(fn, Function)
        n = nodes[int(key)]
        n.kernel = external_kernel(n.name, fn, threads)
    graph = Graph(nodes, [nodes[i] for i in data["inputs"]], data["outputs"], data["tuple_output"])
    graph.devices = [VirtualDevice(*d) for d in data["devices"]]
    graph.output_tree = _tree(data.get("output_tree"))
    p = data["plan"]
    plan = MemoryPlan(
        {int(k): v for k, v in p["offsets"].items()},
        p["bytes"], p["naive"], p["lower_bound"], p["method"],
        {int(k): v for k, v in p["arena_of"].items()}, p["arena_bytes"], p["arena_names"],
        p["arena_device"], p["device_names"],
    )  # fmt: skip
    program = Program(graph, plan, threads)
    program.slot_count, program.slot_of = data["slot_count"], slot_of
    program.constants = [(slot, constants[slot]) for slot in data["constant_slots"]]
    program.arena_slots = [(slot, device, offset) for slot, device, offset in data["arena_slots"]]
    program.slot_device = {int(k): v for k, v in data["slot_device"].items()}
    program.parallel, program.uses_blas = data["parallel"], data["uses_blas"]
    for item in data["schedule"]:
        if isinstance(item, dict):
            program.schedule.append(Segment(item["segment"], item["nodes"]))
        else:
            program.schedule.append(int(item))
            program.python_steps[int(item)] = nodes[int(item)].kernel.python_step()  # type: ignore[union-attr]
    types = [_type_from_json(t) for t in data["output_types"]]
    return program, types, list(data["output_names"])
