"""`codegen.build`: the back end as stages, each returning a typed value.

    optimise (passes) -> fuse (FuseOps) -> lower (Graph of kernels) -> plan memory
    (MemoryPlan) -> link (Program: slots, native calls, segments) -> emit LLVM (text)
    -> JIT (JitLibrary) -> runtime (Runtime)

Runs under the current PassContext, so `opt_level`, `disabled_pass` and config keys apply as
in TVM's `relay.build`. A module that mentions devices is planned (PlanDevices) before
fusion; each device gets its own arena and every device_copy is a copy kernel between two
arenas (codegen/plan/devices.py).

Config: the `codegen.*` keys (codegen/options.py), read once into a BuildOptions that the
stages receive whole and the executable keeps (and saves).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from os import PathLike
from typing import Any

import numpy as np

import passmgr as pm
from egraph_ir.dims import evaluate, typical_sizes
from egraph_ir.errors import CodegenError, CompilerError, TypeInferenceError
from egraph_ir.expr import Function, If
from egraph_ir.infer import infer_type
from egraph_ir.measured import KernelTimes
from egraph_ir.module import IRModule
from egraph_ir.specialize import size_polynomials, specialize, symbolic_names
from egraph_ir.visitor import post_order
from passmgr.passes.canonicalize_qnn import import_onnx
from passmgr.standard import standard_pipeline

from .external import control, loop, register_external
from .external.host import compile_regions
from .external.loop import lift_control_flow
from .llvm import JitLibrary
from .llvm.jit import Compilation, start_helpers
from .llvm.modules import SharedModules, emit_modules
from .loop_ir import Kernel
from .loop_text import kernel_text
from .lower.cache import KernelCache
from .lower.kinds import ExternalKernel
from .lower.symbolic import NotForEverySize, SymbolicKernels
from .measure import choices
from .options import BuildOptions
from .plan.depth_first import depth_first
from .plan.devices import assign_devices, mentions_devices, plan_devices
from .plan.every_size import serves_every_size, symbolic_shapes
from .plan.graph import Graph, build_graph
from .plan.link import link
from .plan.memory import plan_graph
from .prepare import (
    bind_params,
    check_budget,
    outputs_of,
    refuse_function_values,
    without_closures,
)
from .runtime import blas
from .runtime.executable import Executable
from .runtime.profile import KernelTime, Profile
from .symbolic import SymbolicExecutable

log = logging.getLogger(__name__)
TARGETS = ("llvm",)
STAGE_NAMES = {  # what progress shows while a stage runs
    "external": "compiling external regions",
    "lower": "lowering kernels to loop nests",
    "plan": "planning memory",
    "emit": "emitting LLVM IR",
    "jit": "LLVM optimising and compiling",
}


def build(
    mod: IRModule | Function | str | PathLike[str] | Any,
    target: str = "llvm",
    params: Mapping[str, np.ndarray] | None = None,
    extra_passes: Sequence[pm.Pass] = (),
    on_stage: Callable[[str], None] | None = None,
) -> Executable | SymbolicExecutable:
    """Compile `mod` (its main function) for `target`: an IR module or function, or an
    ONNX model (a path or a ModelProto, imported with `from_onnx`). `params` binds inputs
    to constants; `extra_passes` (e.g. EqSat over a user's rule file) run after the
    standard pipeline; `on_stage` hears the name of each stage as it starts (progress).
    A program with symbolic dimensions gives a SymbolicExecutable, which runs any
    consistent shape (codegen/symbolic.py)."""
    if target not in TARGETS:
        raise CodegenError(f"unknown target '{target}'; supported: {', '.join(TARGETS)}")
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    elif not isinstance(mod, IRModule):
        if not isinstance(mod, str | PathLike) and not hasattr(mod, "graph"):
            raise CodegenError(
                "build takes an IRModule, a Function, an ONNX file path or an onnx "
                f"ModelProto; got {type(mod).__name__}"
            )
        mod = import_onnx(mod)
    if "main" not in dict(mod.items()):
        raise CodegenError("the module has no 'main' function")
    options = BuildOptions.from_context()
    kernel_db = choices.resolve(options.kernel_db)  # a bad path fails before any work
    if symbolic_names(mod["main"]):
        symbolic = _symbolic(mod, options, kernel_db, params, extra_passes)
        symbolic.prepare()  # the program for every size, compiled with the build
        return symbolic
    with collector_paused():
        return _build(mod, options, kernel_db, params, extra_passes, on_stage)


def _symbolic(
    mod: IRModule,
    options: BuildOptions,
    kernel_db: KernelTimes | None,
    params: Mapping[str, np.ndarray] | None,
    extra_passes: Sequence[pm.Pass],
) -> SymbolicExecutable:
    """A program with size variables: one executable for every shape (codegen/symbolic.py).
    The pipeline and fusion run once, on the symbolic program (its rules fire only where
    they hold for every size); then one program is built for every size where each group
    lowers to a kernel with run-time extents, else each specialisation lowers and
    compiles what its sizes change. Choices over sizes are made for the upper bounds of
    `codegen.size_bounds`. A program the symbolic pipeline does not take (control flow,
    external regions, devices, or a pass that fails on sizes) is optimised per
    specialisation instead."""
    mod = infer_type(mod)
    names = symbolic_names(mod["main"])
    unknown = sorted(set(options.size_bounds) - set(names))
    if unknown:
        raise CodegenError(
            f"codegen.size_bounds names {unknown}; the program's sizes are {', '.join(names)}"
        )
    largest = typical_sizes({n: high for n, (_, high) in options.size_bounds.items()})
    with largest:  # choices over sizes are made for the upper bounds
        optimised = _optimise_once(mod, params, extra_passes)
        fused = _fuse_once(optimised)
    builds = _SymbolicBuilds(
        mod, options, kernel_db, params, extra_passes, optimised, fused, largest
    )  # fmt: skip
    taken = fused is not None
    return SymbolicExecutable(
        mod, builds.specialisation, outputs_of(mod["main"]), options, optimised is not None,
        builds.for_every_size if taken else None, builds.right_at if taken else None,
    )  # fmt: skip


class _SymbolicBuilds:
    """What a symbolic program's executable builds (codegen/symbolic.py): specialisations,
    the program for every size, and the check that it is right at a set of sizes. Kept
    across them: the pass context, what was emitted and compiled, the lowered kernels."""

    def __init__(
        self,
        mod: IRModule,
        options: BuildOptions,
        kernel_db: KernelTimes | None,
        params: Mapping[str, np.ndarray] | None,
        extra_passes: Sequence[pm.Pass],
        optimised: IRModule | None,
        fused: IRModule | None,
        largest: typical_sizes,
    ) -> None:
        self.mod, self.options, self.kernel_db = mod, options, kernel_db
        self.params, self.extra_passes, self.optimised = params, extra_passes, optimised
        self.context = pm.PassContext.current()
        self.largest = largest  # choices over sizes are made for the upper bounds
        self.shared = SharedModules()  # what the builds emit and compile, kept for the next
        names = tuple(symbolic_names(mod["main"]))
        self.kernels = SymbolicKernels(names, fused) if fused is not None else None
        self.edges = size_polynomials(fused) if fused is not None else []
        # which shapes are 0, 1 or more -> whether the program for every size is right
        # there: the typing at sizes (milliseconds) depends only on that
        self.edge_answers: dict[tuple[int, ...], bool] = {}

    def specialisation(self, sizes: Mapping[str, int]) -> Executable:
        """The program built for these sizes (fused once where it was: a group's kernel
        may serve every size)."""
        options, db, shared = self.options, self.kernel_db, self.shared
        with self.context, collector_paused(), self.largest:
            if self.kernels is not None:
                static = self._fused_at(sizes)
                return _build(static, options, db, None, (), None, True, shared, self.kernels)
            if self.optimised is not None:
                static = specialize(self.optimised, sizes)
                return _build(static, options, db, None, (), None, True, shared)
            static = specialize(self.mod, sizes)
            return _build(static, options, db, self.params, self.extra_passes, None, False, shared)

    def for_every_size(self, capacity: Mapping[str, int]) -> Executable | None:
        """The program built at `capacity` for every size up to it (else as one more
        specialisation), or None where a group's kernel serves one set of sizes only."""
        kernels = self.kernels
        assert kernels is not None
        kernels.every_size_only = True
        try:
            exe = self.specialisation(capacity)
        except NotForEverySize as exc:
            log.info("the program is built per size: %s", exc)
            return None
        finally:
            kernels.every_size_only = False
        every_size(exe, kernels, capacity)
        return exe

    def right_at(self, sizes: Mapping[str, int]) -> bool:
        """Is the program for every size right at `sizes`? Typed at them where a shape
        inside it is 0 or 1 there; an error where the program is not well typed at them."""
        assert self.kernels is not None
        edges = tuple(min(evaluate(d, sizes), 2) for d in self.edges)
        if all(v == 2 for v in edges):
            return True
        if edges not in self.edge_answers:  # the same edges at 0 and 1 type the same
            with self.largest:
                static = self._fused_at(sizes)
            self.edge_answers[edges] = len(self.kernels.pairs(static)) == len(self.kernels.groups)
        return self.edge_answers[edges]

    def _fused_at(self, sizes: Mapping[str, int]) -> IRModule:
        """The fused program at `sizes`; where it is not typed at them, the error the
        program itself gives (in its own names, as the interpreter says it)."""
        assert self.kernels is not None
        try:
            return self.kernels.begin(sizes)
        except TypeInferenceError:
            specialize(self.mod, sizes)
            raise


def every_size(exe: Executable, kernels: SymbolicKernels, capacity: Mapping[str, int]) -> None:
    """Make `exe`, built at `capacity` from the fused symbolic program, serve every size up
    to it where it can (codegen/plan/every_size.py); the reason it cannot is logged."""
    why = serves_every_size(exe.program)
    shapes = symbolic_shapes(exe.graph, build_graph(kernels.fused["main"], None), capacity)
    if shapes is None and not why:
        why = "its graph does not pair with the symbolic program's"
    if why or not shapes:
        log.info("the program is built per size: %s", why or "no shape names a size")
        return
    exe.serve_every_size(shapes)


def _optimise_once(
    mod: IRModule, params: Mapping[str, np.ndarray] | None, extra_passes: Sequence[pm.Pass]
) -> IRModule | None:
    """The standard pipeline over a symbolic program, or None where it is not taken."""
    simple = len(dict(mod.items())) == 1 and not mentions_devices(mod)
    if not simple or any(isinstance(n, If) for n in post_order(mod["main"].body)):
        return None
    try:
        with collector_paused():
            return optimise(mod, params, extra_passes)
    except CompilerError as exc:
        log.info("the pipeline does not take the symbolic program (%s): per size instead", exc)
        return None


def _fuse_once(optimised: IRModule | None) -> IRModule | None:
    """The optimised symbolic program fused, or None where that is not taken."""
    if optimised is None:
        return None
    try:
        return fuse(optimised)
    except CompilerError as exc:
        log.info("FuseOps does not take the symbolic program (%s): per size instead", exc)
        return None


def symbolic_executable(mod: IRModule, options: BuildOptions) -> SymbolicExecutable:
    """A saved symbolic program loaded again (codegen/artifact/load.py): other sizes
    compile with the options it was built with, under the caller's PassContext."""
    return _symbolic(mod, options, choices.resolve(options.kernel_db), None, ())


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a build runs: the build allocates
    millions of small objects (IR, loop IR, llvmlite's), each full collection walks them
    all, and the garbage a build leaves is mostly freed by reference counts anyway; it
    was 15-20% of a CNN's compile (docs/performance.md)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _build(
    mod: IRModule,
    options: BuildOptions,
    kernel_db: KernelTimes | None,
    params: Mapping[str, np.ndarray] | None,
    extra_passes: Sequence[pm.Pass],
    on_stage: Callable[[str], None] | None,
    optimised: bool = False,
    modules: SharedModules | None = None,
    prefused: SymbolicKernels | None = None,
) -> Executable:
    """build() once its arguments are checked. A symbolic program's specialisation says
    `optimised` (mod has been through the pipeline, so it is only typed) and gives what
    its earlier specialisations emitted and compiled (`modules`: a module per kernel, so
    each kernel the sizes do not change is emitted and compiled once); `prefused`: mod is
    the symbolic program's fused module with the sizes put in, and each group takes the
    kernel its symbolic group lowers to where it has one (codegen/lower/symbolic.py)."""
    threads = options.threads
    start_helpers(threads)  # compile helpers start while the passes run
    times: dict[str, float] = {}
    clock = _Clock(times, on_stage)
    mod = without_closures(mod)
    mod = lift_control_flow(mod)  # data-dependent If and Loop: regions of compiled programs
    mod, externals = clock("external", compile_regions, mod, threads, options.external_options)
    if optimised:
        mod = clock("optimise", infer_type, mod)
    else:
        mod = clock("optimise", optimise, mod, params, extra_passes)
    refuse_function_values(mod["main"])  # typed by the passes, before any lowering
    if mentions_devices(mod):
        placed = clock("devices", plan_devices, mod)
    elif options.depth_first and prefused is None:
        placed = clock("depth-first", depth_first, mod)
    else:
        placed = mod
    fused = placed if prefused is not None else clock("fuse", fuse, placed)
    with choices.using(kernel_db):
        graph, cache = clock("lower", lower, fused, options.host_fallback, externals, prefused)
    devices = assign_devices(graph, fused["main"])
    plan = clock("plan", plan_graph, graph, devices, options.memory_planner, options.pools)
    check_budget(plan.bytes_per_device, options.memory_budget)
    shared = share_identical_kernels(graph)
    sizes = prefused.sizes if prefused is not None else None
    program = clock("link", link, graph, devices, plan, threads, sizes)
    native = bool(program.calls)
    kernels = unique_kernels(graph)
    objects = modules.objects if modules is not None else None
    compilation = Compilation(threads, objects)  # each compiles while the next is emitted
    try:
        known = modules.texts if modules is not None else None
        glue_key = program.glue_key() if program.size_names else ""
        emit = partial(emit_modules, per_kernel=modules is not None, known=known, glue=glue_key)
        parts = (
            clock("emit", emit, kernels, program.extend, threads, compilation.send)
            if native
            else []
        )
        source = "\n".join(parts)
        if program.uses_blas:
            blas.register_symbols()
        library = clock("jit", JitLibrary, compilation) if native else None
    except BaseException:
        compilation.abandon()
        raise
    if library is not None:
        times.update({f"llvm {k}": v for k, v in library.seconds.items()})
    t0 = time.perf_counter()
    types, names = outputs_of(fused["main"])
    reused = cache.hits + shared
    every_size = prefused.taken if prefused is not None else 0
    exe = Executable(
        program, library, types, names, options, source, times, mod, fused, reused,
        compilation.compiled, every_size,
    )  # fmt: skip
    times["bind"] = time.perf_counter() - t0
    return exe


# data-dependent If: a region whose branches are programs this builder compiles
register_external(control.TARGET, control.region_builder(build), override=True)
register_external(loop.TARGET, loop.region_builder(build), override=True)


class _Clock:
    """Times each stage into `times` under its name; a stage returns what its function
    returns (typed: `clock("fuse", fuse, mod)` is an IRModule)."""

    def __init__(self, times: dict[str, float], on_stage: Callable[[str], None] | None) -> None:
        self.times = times
        self.on_stage = on_stage

    def __call__[**P, R](
        self, stage: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        if self.on_stage is not None:
            self.on_stage(STAGE_NAMES.get(stage, stage))
        t0 = time.perf_counter()
        result = fn(*args, **kwargs)
        self.times[stage] = time.perf_counter() - t0
        return result


def optimise(
    mod: IRModule, params: Mapping[str, np.ndarray] | None, extra: Sequence[pm.Pass] = ()
) -> IRModule:
    """Type inference, parameter binding and the standard pipeline (plus `extra` passes)."""
    mod = infer_type(mod)
    if params:
        mod = bind_params(mod, params)
    return pm.Sequential([standard_pipeline(), *extra], name="Optimise")(mod)


def fuse(mod: IRModule) -> IRModule:
    """Group operators into primitive functions (TVM's FuseOps)."""
    return pm.passes.FuseOps()(mod)


def lower(
    fused: IRModule,
    host_fallback: bool = True,
    externals: Mapping[str, ExternalKernel] = {},
    prefused: SymbolicKernels | None = None,
) -> tuple[Graph, KernelCache]:
    """The execution graph of the fused main function, every group lowered to a kernel;
    calls of external regions become their target's kernels."""
    if prefused is not None:
        cache = KernelCache(host_fallback, prefused, prefused.pairs(fused))
    else:
        cache = KernelCache(host_fallback)

    def external(name: str) -> ExternalKernel:
        if name not in externals:
            raise CodegenError(
                f"main calls @{name}, which is not an external region; the graph executor "
                "runs calls of global functions only for partitioned regions"
            )
        return externals[name]

    return build_graph(fused["main"], cache.lower, external), cache


def unique_kernels(graph: Graph) -> list[Kernel]:
    """The loop-IR kernels to compile, once per name (shared by identical groups)."""
    seen: dict[str, Kernel] = {}
    for kernel in graph.kernels():
        for k in kernel.jit_kernels():
            seen.setdefault(k.name, k)
    return list(seen.values())


def share_identical_kernels(graph: Graph) -> int:
    """Kernels with the same loop IR (the padding of two convolutions over one shape, say)
    take one name, so they compile once; returns how many names were merged."""
    first: dict[str, str] = {}
    rename: dict[str, str] = {}
    for k in unique_kernels(graph):
        key = repr((k.buffers, k.extent, k.unroll, k.size_names)) + kernel_text(k)
        rename[k.name] = first.setdefault(key, k.name)
    for kernel in graph.kernels():
        for k in kernel.jit_kernels():
            k.name = rename.get(k.name, k.name)
    return sum(old != new for old, new in rename.items())


__all__ = [
    "Executable",
    "KernelTime",
    "Profile",
    "SymbolicExecutable",
    "bind_params",
    "build",
    "optimise",
]
