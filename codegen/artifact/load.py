"""Save and load executables: `exe.save(path)` and `codegen.load(path)`.

The file is a zip archive (readable with any zip tool) holding what the runtime needs and
nothing it would have to recompile:

    manifest.json    format and project versions, target triple, CPU name and the CPU
                     features the code was generated for, thread budget, the SHA-256
                     digest of every other member
    signature        (optional) an Ed25519 signature of manifest.json
    program.json     the execution graph, memory plan, slot table layout and schedule,
                     input and output types and names, host-kernel functions (IR text)
    constants/N.npy  the constant buffers, by slot (loaded with allow_pickle=False)
    code/K.o         the native code: the object files LLVM made, relocated on load
    source.ll        the LLVM IR, for `get_source()` (compressed)

Loading checks the format version, the target triple and that this CPU has every feature
the code uses, then relocates the object files into a fresh engine: no pass, no lowering,
no LLVM optimisation or code generation runs. Every member's SHA-256 digest is in the
manifest and checked first, and program.json is checked against the graph (see
check.py): damage is a CodegenError, never a crash. Like a shared library, a saved
executable is native code: a file from elsewhere is trusted through its signature
(`save(path, key=...)`, `load(path, trusted_keys=...)`), not through these checks.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from egraph_ir.device import VirtualDevice
from egraph_ir.dims import from_literal
from egraph_ir.errors import CodegenError, CompilerError
from egraph_ir.expr import Function
from egraph_ir.infer import infer_type
from egraph_ir.text.parser import parse
from egraph_ir.types import TensorType, TupleType, Type

from ..external.host import external_kernel
from ..llvm import JitLibrary
from ..lower.kinds import CompiledKernel, HostKernel
from ..options import BuildOptions, default_threads, threads_from_env
from ..plan.devices import DevicePlan
from ..plan.graph import AliasNode, FieldNode, Graph, InputNode, KernelNode, Node, ParamNode
from ..plan.link import Program, Segment
from ..plan.memory import MemoryPlan
from ..runtime import blas
from ..runtime.executable import Executable
from ..symbolic import SymbolicExecutable
from .check import (
    MANIFEST,
    check_program,
    check_signature,
    check_threads,
    read_member,
    read_members,
)
from .write import FORMAT, host_features


def load(
    path: str | Path,
    threads: int | None = None,
    check_devices: bool | None = None,
    trusted_keys: Sequence[Any] | None = None,
) -> Executable | SymbolicExecutable:
    """An executable saved by `Executable.save`, ready to run (nothing is recompiled).
    `threads` and `check_devices` override the saved run-time options (None: the
    EGC_NUM_THREADS variable, else as saved, at most one thread per core; threads=0: every
    core, up to the compiled count; `Executable.set_threads` changes it later). With
    `trusted_keys` (raw Ed25519 public keys) only a file signed by one of them loads.
    Every member is checked against its digest and program.json against the graph before
    anything is used (codegen/artifact/check.py): a damaged file is one CodegenError."""
    t0 = time.perf_counter()
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise CodegenError(f"{path}: no such file") from None
    except (OSError, zipfile.BadZipFile, ValueError, NotImplementedError, EOFError) as exc:
        raise CodegenError(f"{path}: not a saved executable ({exc})") from None
    with zf:
        manifest_bytes = read_member(path, zf, MANIFEST)
        manifest = _json(path, MANIFEST, manifest_bytes)
        _check_manifest(path, manifest)
        if trusted_keys is not None:
            check_signature(path, zf, manifest_bytes, list(trusted_keys))
        members = read_members(path, zf, manifest)
    if manifest.get("symbolic"):
        return _load_symbolic(path, manifest, members, threads, check_devices)
    data = _json(path, "program.json", members.get("program.json", b""))
    constants = {
        int(Path(name).stem): _array(path, name, blob)
        for name, blob in members.items()
        if name.startswith("constants/")
    }
    objects = [members[f"code/{k}.o"] for k in range(sum(n.startswith("code/") for n in members))]
    source = members.get("source.ll", b"").decode(errors="replace")
    try:
        saved = BuildOptions.from_json(manifest["options"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CodegenError(f"{path}: damaged manifest options ({exc})") from None
    check_threads(path, saved.threads)
    if threads is None:  # EGC_NUM_THREADS, or as saved; never more than the compiled count
        threads = min(threads_from_env() or saved.threads, saved.threads, default_threads())
    options = saved.at_run_time(threads, check_devices)
    check_program(path, data, constants, len(objects))
    try:
        program, types, names = _program_from_json(data, constants, saved.threads, options)
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise CodegenError(f"{path}: damaged or incomplete ({type(exc).__name__}: {exc})") from None
    if manifest.get("blas"):
        blas.register_symbols()
    library = JitLibrary.from_objects(objects) if objects else None
    try:
        exe = Executable(program, library, types, names, options, source)
    except KeyError as exc:  # a step or segment the object code does not define
        raise CodegenError(f"{path}: damaged: no code for {exc}") from None
    except MemoryError:
        arenas = program.plan.arena_bytes
        raise CodegenError(f"{path}: its arenas ({arenas} bytes) do not fit in memory") from None
    exe.compile_seconds = {"load": time.perf_counter() - t0}
    return exe


def _load_symbolic(
    path: str | Path,
    manifest: dict[str, Any],
    members: dict[str, bytes],
    threads: int | None,
    check_devices: bool | None,
) -> SymbolicExecutable:
    """A program with size variables (write.save_symbolic): its module parsed again, and
    its saved specialisations loaded; other sizes compile with the saved options."""
    from ..build import symbolic_executable  # build sits above the artifact reader

    try:
        module = parse(members["symbolic/module.txt"].decode())
        options = BuildOptions.from_json(manifest["options"])
    except (KeyError, ValueError, CompilerError) as exc:
        raise CodegenError(f"{path}: damaged symbolic program ({exc})") from None
    exe = symbolic_executable(module, options)
    sizes_list = _json(path, "symbolic/sizes.json", members.get("symbolic/sizes.json", b"[]"))
    for k, sizes in enumerate(sizes_list):
        blob = members.get(f"symbolic/{k}.egc", b"")
        static = load(io.BytesIO(blob), threads, check_devices)  # type: ignore[arg-type]
        if not isinstance(static, Executable):
            raise CodegenError(f"{path}: damaged symbolic program (member {k})")
        exe.adopt(sizes, static)
    return exe


def _json(path: str | Path, name: str, blob: bytes) -> Any:
    try:
        return json.loads(blob)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CodegenError(f"{path}: damaged or incomplete ({name}: {exc})") from None


def _array(path: str | Path, name: str, blob: bytes) -> np.ndarray:
    try:
        return np.load(io.BytesIO(blob), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise CodegenError(f"{path}: damaged member {name} ({exc})") from None


def _check_manifest(path: str | Path, manifest: Any) -> None:
    if not isinstance(manifest, dict):
        raise CodegenError(f"{path}: damaged manifest (not an object)")
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
    features = manifest.get("features", ())
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise CodegenError(f"{path}: damaged manifest (features)")
    missing = sorted(set(features) - host_features())
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


def _type_from_json(d: dict[str, Any]) -> Type:
    if "fields" in d:
        return TupleType(tuple(_type_from_json(f) for f in d["fields"]))
    return TensorType(tuple(d["shape"]), d["dtype"])


def _function(text: str) -> Function:
    fn = infer_type(parse(text))["main"]
    assert isinstance(fn, Function)
    return fn


def _node(
    d: dict[str, Any], kernels: dict[int, CompiledKernel], value: Callable[[int], np.ndarray]
) -> Node:
    """A saved node (write.py's _node_json) back, with its kernel or constant."""
    shape = tuple(d["shape"]) if d["shape"] is not None else None
    common = (d["id"], d["name"], tuple(d["inputs"]), shape, d["dtype"])
    match d["op"]:
        case "input":
            return InputNode(*common)
        case "param":
            return ParamNode(*common, value(d["id"]))
        case "kernel":
            ops = tuple(d["ops"])
            kernel = kernels.get(d["id"])
            variant = d.get("variant", "")  # absent in files of format 5 before it existed
            sources = tuple(d.get("sources", ()))  # absent before profiles named ONNX nodes
            predicted = float(d.get("predicted", 0.0))  # absent before layouts had costs
            layout = d.get("layout", "")  # absent before reports showed layouts
            return KernelNode(
                *common, kernel, d["kind"], ops, d["flops"], d["bytes"], variant, sources,
                predicted, layout,
            )  # fmt: skip
        case "alias":
            return AliasNode(*common)
        case "field":
            return FieldNode(*common, d["index"])
    raise CodegenError(f"program.json: node {d['id']} of unknown kind {d['op']!r}")


def _program_from_json(
    data: dict[str, Any], constants: dict[int, np.ndarray], threads: int, options: BuildOptions
) -> tuple[Program, list[Type], list[str]]:
    slot_of = {int(k): v for k, v in data["slot_of"].items()}
    entries = {d["id"]: d for d in data["nodes"]}
    kernels: dict[int, CompiledKernel] = {}
    for key, text in data["host_steps"].items():
        fn = _function(text)
        d = entries[int(key)]
        kernels[int(key)] = HostKernel(d["name"], list(d["ops"]), fn)
    for key, text in data.get("external_steps", {}).items():
        d = entries[int(key)]
        kernels[int(key)] = external_kernel(
            d["name"], _function(text), options.threads, options.external_options
        )
    nodes = [_node(d, kernels, lambda i: constants[slot_of[i]]) for d in data["nodes"]]
    inputs = [n for n in (nodes[i] for i in data["inputs"]) if isinstance(n, InputNode)]
    graph = Graph(
        nodes,
        inputs,
        data["outputs"],
        data["tuple_output"],
        output_tree=_tree(data.get("output_tree")),
    )
    devices = DevicePlan(
        tuple(VirtualDevice(*d) for d in data["devices"]),
        tuple(data["device_of"]),
        {int(k): v for k, v in data["copy_source"].items()},
    )
    p = data["plan"]
    plan = MemoryPlan(
        {int(k): v for k, v in p["offsets"].items()},
        p["bytes"], p["naive"], p["lower_bound"], p["method"],
        {int(k): v for k, v in p["arena_of"].items()}, p["arena_bytes"], p["arena_names"],
        p["arena_device"], p["device_names"],
    )  # fmt: skip
    program = Program(graph, plan, threads, devices)
    program.slot_count, program.slot_of = data["slot_count"], slot_of
    program.constants = [(slot, constants[slot]) for slot in data["constant_slots"]]
    program.arena_slots = [(slot, device, offset) for slot, device, offset in data["arena_slots"]]
    program.arena_keys = list(data["arena_keys"])  # kept, so a loaded program saves again
    program.slot_device = {int(k): v for k, v in data["slot_device"].items()}
    program.parallel, program.uses_blas = data["parallel"], data["uses_blas"]
    sizes = data.get("sizes", {})  # a symbolic program's specialisation (its glue reads them)
    program.size_names, program.sizes = tuple(sizes), tuple(int(v) for v in sizes.values())
    program.symbolic_shapes = {
        int(k): tuple(d if isinstance(d, int) else from_literal(d) for d in shape)
        for k, shape in data.get("symbolic_shapes", {}).items()
    }
    for item in data["schedule"]:
        if isinstance(item, dict):
            program.schedule.append(Segment(item["segment"], item["nodes"]))
        else:
            program.schedule.append(int(item))
            program.python_steps[int(item)] = nodes[int(item)].kernel.python_step()  # type: ignore[union-attr]
    types = [_type_from_json(t) for t in data["output_types"]]
    return program, types, list(data["output_names"])
