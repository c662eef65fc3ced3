"""`Executable`: a compiled module ready to run, profile, inspect or save.

It holds the linked program (codegen/plan/link.py), the compiled code (a JitLibrary) and the
runtime over them. A built executable also keeps its IR (`optimized_module`, `module`); one
read back by `codegen.load` has only what running needs, so those are None there.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from egraph_ir.compare import leaves
from egraph_ir.dims import Dim
from egraph_ir.errors import CodegenError
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType, Type, tensor_types

from ..artifact.write import save
from ..llvm import JitLibrary
from ..lower.kinds import ExternalKernel
from ..options import BuildOptions
from ..plan.every_size import SizeBinding, SizeTable, compact_arena
from ..plan.graph import AliasNode, KernelNode
from ..plan.link import Program
from ..plan.memory import MemoryPlan, graph_storage_ids
from . import latency
from .buffers import OutputBuffers
from .latency import Latency
from .profile import KernelTime, Profile
from .runner import Runtime


class Executable:
    """A compiled module: call it (or `run`) on numpy inputs; `profile`, `save`,
    `get_source()`, `graph_json`, `memory_plan`, `input_types`, `output_types`."""

    def __init__(
        self,
        program: Program,
        library: JitLibrary | None,
        output_types: list[Type],
        output_names: list[str],
        options: BuildOptions,
        source: str = "",
        times: dict[str, float] | None = None,
        optimised: IRModule | None = None,
        fused: IRModule | None = None,
        kernels_reused: int = 0,
        modules_compiled: int = 0,
        kernels_for_every_size: int = 0,
    ) -> None:
        self.program = program
        self.graph = program.graph
        self.library = library
        self.optimized_module = optimised  # after the rule-based pipeline, before fusion
        self.module = fused  # the fused IR that was compiled
        self.output_types = output_types
        self.output_names = output_names
        self.compile_seconds = times if times is not None else {}
        self._source = source
        self.input_types = {
            n.name: TensorType(n.shape, n.dtype)  # type: ignore[arg-type]
            for n in self.graph.inputs
        }
        self._expected = [  # (name, dtype, shape) per input, for the run's fast path
            (name, np.dtype(t.dtype), t.shape) for name, t in self.input_types.items()
        ]
        self.options = options  # how it was built; the run-time half may differ after load
        self.runtime = Runtime(program, library, options.threads, options.check_devices)
        self.kernels_reused = kernels_reused  # fused groups that reused another's compiled code
        self.modules_compiled = modules_compiled  # LLVM modules compiled by this build
        # groups of a symbolic program's specialisation run by kernels with run-time extents
        self.kernels_for_every_size = kernels_for_every_size
        self.at: SizeBinding | None = None  # built for every size: the sizes this one runs
        self._size_table: SizeTable | None = None  # made when first bound to sizes

    @property
    def for_every_size(self) -> bool:
        """Built for every size up to its own (codegen/plan/every_size.py)?"""
        return bool(self.program.symbolic_shapes)

    def serve_every_size(self, shapes: Mapping[int, tuple[int | Dim, ...]]) -> None:
        """Mark this build, made at a symbolic program's capacity, as serving every size
        up to it: `shapes` are its nodes' that name sizes (codegen/plan/every_size.py)."""
        program = self.program
        program.symbolic_shapes = dict(shapes)
        self._size_table = None
        capacity = dict(zip(program.size_names, program.sizes, strict=True))
        view = self.at_sizes(capacity)
        assert view is not None, "a program fits the sizes it was planned at"
        self.at = view.at

    def at_sizes(self, sizes: Mapping[str, int]) -> Executable | None:
        """This program, built for every size, at `sizes`: an executable sharing its
        code, arena and threads that takes inputs of those shapes; None where they need
        more room than the program was planned with (or it is not built for every size)."""
        if not self.for_every_size:
            return None
        if self._size_table is None:
            self._size_table = SizeTable(self.program)
        binding = self._size_table.bind(sizes)
        if binding is None:
            return None
        if binding.sparse:  # far below the capacity: its tensors planned close together
            options = self.options
            binding = compact_arena(self.program, binding, options.memory_planner, options.pools)
        view = ExecutableAtSizes.__new__(ExecutableAtSizes)
        view.__dict__.update(self.__dict__)
        view.at = binding
        view._expected = [
            (n.name, np.dtype(n.dtype), binding.shapes.get(n.id, n.shape or ()))
            for n in self.graph.inputs
        ]
        return view

    # ------------------------------------------------------------ running
    def run(self, /, *args: Any, **inputs: Any) -> Any:
        """Run on numpy inputs: by name (keywords, or one dict as ONNX Runtime takes them)
        or by position. Returns what the function returns: an array, or a tuple (nested as
        the function's result); `run_dict` always gives a dict by output name."""
        if not args and len(inputs) == len(self._expected):
            fast = self._fast_feeds(inputs)
            if fast is not None:
                return self.graph.shape_outputs(self.runtime.run(fast, at=self.at))
        results = self.runtime.run(self._feeds(self._named(args, inputs)), at=self.at)
        return self.graph.shape_outputs(results)

    __call__ = run

    def run_into(
        self, buffers: OutputBuffers | Mapping[str, np.ndarray], /, *args: Any, **inputs: Any
    ) -> Any:
        """Run as `run` does, with the outputs the kernels write placed in `buffers`
        (codegen/runtime/buffers.py: storage kept from run to run, ONNX Runtime's IO
        binding), or in the caller's own arrays by output name. What it returns are
        those arrays (an output that is an input or a constant is a copy, as with run)."""
        pool = buffers if isinstance(buffers, OutputBuffers) else OutputBuffers(1, buffers)
        unknown = sorted(set(pool.arrays) - set(self.output_names))
        if unknown:
            raise CodegenError(
                f"no output(s) {unknown}; the outputs are {', '.join(self.output_names)}"
            )
        names = self._output_name_of

        def place(node_id: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
            name = names.get(node_id)
            return np.empty(shape, dtype) if name is None else pool.take(name, shape, dtype)

        feeds = self._fast_feeds(inputs) if not args else None
        if feeds is None:
            feeds = self._feeds(self._named(args, inputs))
        results = self.runtime.run(feeds, at=self.at, place=place)
        pool.finish_run()
        return self.graph.shape_outputs(results)

    @functools.cached_property
    def _output_name_of(self) -> dict[int, str]:
        """Each output node's name (what run_into's buffers are keyed by)."""
        return dict(zip(self.graph.outputs, self.output_names, strict=False))

    def _named(self, args: tuple[Any, ...], inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        """Inputs given by position, by name or as one dict (as ONNX Runtime takes them),
        by name."""
        names = list(self.input_types)
        if len(args) == 1 and isinstance(args[0], Mapping):  # feeds by name, in one dict
            inputs = {**args[0], **inputs}
            args = ()
        if args:
            if len(args) > len(names):
                raise CodegenError(f"run takes {len(names)} input(s), got {len(args)}")
            clash = sorted(set(names[: len(args)]) & set(inputs))
            if clash:
                raise CodegenError(f"input(s) {clash} given both by position and by name")
            inputs = {**dict(zip(names, args, strict=False)), **inputs}
        return inputs

    def run_dict(self, /, *args: Any, **inputs: Any) -> dict[str, np.ndarray]:
        """Run as `run` does; the outputs by name (`output_names`: ONNX's names for an
        imported model), nested tuples flattened in order, one entry per output always."""
        results = leaves(self.run(*args, **inputs))
        return dict(zip(self.output_names, results, strict=True))

    def set_threads(self, threads: int) -> None:
        """Run with `threads` threads from now on (0: every core), at most the count the
        kernels were split for at compile time (codegen.num_threads)."""
        compiled = dataclasses.replace(self.options, threads=self.program.threads)
        self.options = compiled.at_run_time(threads)
        self.runtime = Runtime(
            self.program, self.library, self.options.threads, self.options.check_devices
        )

    def _fast_feeds(self, inputs: Mapping[str, Any]) -> list[np.ndarray] | None:
        """The feeds when every input is already a C-contiguous array of its parameter's
        dtype and shape (the common case, checked in a few hundred nanoseconds), else
        None: `_feeds` then converts, or explains what is wrong."""
        feeds = []
        for name, dtype, shape in self._expected:
            value = inputs.get(name)
            if (
                type(value) is not np.ndarray
                or value.dtype != dtype
                or value.shape != shape
                or not value.flags.c_contiguous
            ):
                return None
            feeds.append(value)
        return feeds

    def _feeds(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        """The inputs in parameter order, checked and made C-contiguous. A value of another
        dtype is cast only when the cast is exact (ints to float, say); otherwise an error."""
        names = list(self.input_types)
        unknown = sorted(set(inputs) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise CodegenError(
                f"inputs do not match the function: missing {missing}, unknown {unknown}; "
                f"expected {names}"
            )
        return [_feed(name, inputs[name], self.input_types[name]) for name in names]

    def profile(self, inputs: Mapping[str, Any], repeats: int = 10) -> Profile:
        """Run `repeats` times kernel by kernel; per kernel the median time, its spread,
        FLOPs, achieved GFLOP/s and GB/s and share of the run, slowest first."""
        feeds = self._feeds(inputs)
        samples: dict[int, list[float]] = {}
        repeats = max(1, int(repeats))
        for _ in range(repeats):
            timings: dict[int, float] = {}
            self.runtime.run(feeds, timings, self.at)
            for node_id, seconds in timings.items():  # in the order they ran
                samples.setdefault(node_id, []).append(seconds)
        medians = {i: float(np.median(v)) for i, v in samples.items()}
        total = sum(medians.values()) or 1.0
        rows = []
        for order, (node_id, values) in enumerate(samples.items()):
            n = self.graph.nodes[node_id]
            assert isinstance(n, KernelNode)  # only kernels are timed
            low, high = np.percentile(values, [10, 90])
            shape, scale = self._measured_shape(n)
            rows.append(
                KernelTime(
                    n.name, n.kind, list(n.ops), medians[node_id], float(low), float(high),
                    n.flops * scale, n.bytes * scale, medians[node_id] / total,
                    n.variant, order, shape, n.sources, n.predicted, n.layout,
                )
            )  # fmt: skip
        sizes = dict(zip(self.program.size_names, self.at.values, strict=True)) if self.at else {}
        return Profile(sorted(rows, key=lambda r: -r.seconds), repeats, sizes)

    def _measured_shape(self, n: KernelNode) -> tuple[tuple[int, ...] | None, float]:
        """A kernel's result shape as it ran and the share of its build-time FLOPs and
        bytes that is (a program for every size, at sizes below its capacity: work taken
        to scale with the result's elements)."""
        if self.at is None or n.id not in self.at.shapes or not n.shape:
            return n.shape, 1.0
        shape = self.at.shapes[n.id]
        return shape, math.prod(shape) / max(1, math.prod(n.shape))

    def benchmark(
        self,
        inputs: Mapping[str, Any],
        repeats: int = 100,
        warmup: int = 5,
        duration: float | None = None,
    ) -> Latency:
        """End-to-end latency: `warmup` untimed runs, then `repeats` timed ones (or as many
        as fit in `duration` seconds); mean, p50/p90/p99, min, max, throughput."""
        feeds = self._feeds(inputs)
        try:
            return latency.measure(
                lambda: self.runtime.run(feeds, at=self.at), self.threads, repeats, warmup, duration
            )
        except ValueError as exc:
            raise CodegenError(f"benchmark: {exc}") from None

    # ------------------------------------------------------------ inspecting
    @property
    def threads(self) -> int:
        """The thread budget every kernel shares (config codegen.num_threads)."""
        return self.runtime.threads

    def get_source(self) -> str:
        """The LLVM IR of the JIT kernels (before optimisation)."""
        return self._source

    def get_optimized_source(self) -> str:
        return self.library.optimized_ir if self.library else ""

    @property
    def graph_json(self) -> str:
        program = self.program
        storage = graph_storage_ids(self.graph, program.plan)
        devices = list(program.devices.device)
        return self.graph.to_json(program.plan.bytes, storage, devices, program.devices.names)

    @property
    def memory_plan(self) -> MemoryPlan:
        return self.program.plan

    @property
    def devices(self) -> list[str]:
        """The devices the graph runs on (index 0 holds main's result)."""
        return self.program.devices.names

    @property
    def stats(self) -> dict[str, Any]:
        """Runs so far and the copies between devices: per (source, destination) pair the
        count and bytes of one run and of all runs together."""
        runs = self.runtime.runs
        per_run = self.runtime.copies
        return {
            "runs": runs,
            "copies_per_run": {k: {"count": c, "bytes": b} for k, (c, b) in per_run.items()},
            "copies": {k: {"count": c * runs, "bytes": b * runs} for k, (c, b) in per_run.items()},
            "copy_bytes_per_run": sum(b for _, b in per_run.values()),
        }

    def kernel_kinds(self) -> dict[str, int]:
        """How many kernels of each kind (loops, gemm, blas, conv, host) and aliases."""
        kinds: dict[str, int] = {}
        for n in self.graph.nodes:
            if isinstance(n, KernelNode | AliasNode):
                key = n.kind if isinstance(n, KernelNode) else n.op
                kinds[key] = kinds.get(key, 0) + 1
        return kinds

    def regions(self) -> list[dict[str, Any]]:
        """The external regions: name, target, ops, input and output types."""
        out = []
        for n in self.graph.nodes:
            k = n.kernel if isinstance(n, KernelNode) else None
            if isinstance(k, ExternalKernel):
                fn = k.function
                out.append(
                    {
                        "name": k.name,
                        "target": k.target,
                        "ops": k.ops,
                        "inputs": [str(p.checked_type) for p in fn.params],
                        "outputs": [str(t) for t in tensor_types(fn.body.checked_type)],
                    }
                )
        return out

    def save(self, path: str, key: Any = None) -> None:
        """Write one file that `codegen.load` runs in another process without compiling;
        with an Ed25519 private `key` (`codegen.new_signing_key()`) the file is signed, and
        `codegen.load(path, trusted_keys=[...])` accepts only files signed by those keys."""
        outputs, source = self.outputs(), self.get_source()
        options = dataclasses.replace(self.options, threads=self.program.threads)  # compiled
        save(path, self.program, self.library, options, outputs, source, key)

    def outputs(self) -> tuple[list[Type], list[str]]:
        """The output types and names."""
        return self.output_types, self.output_names

    def __repr__(self) -> str:
        ins = ", ".join(f"{k}: {t}" for k, t in self.input_types.items())
        outs = ", ".join(
            f"{n}: {t}" for n, t in zip(self.output_names, self.output_types, strict=True)
        )
        kinds = ", ".join(f"{v} {k}" for k, v in sorted(self.kernel_kinds().items()))
        plan = self.program.plan
        return (
            f"<Executable ({ins}) -> ({outs}); kernels: {kinds or 'none'}; "
            f"arena {plan.bytes:,} bytes; {self.threads} thread(s)>"
        )


class ExecutableAtSizes(Executable):
    """A program built for every size, at one set of sizes (Executable.at_sizes): it
    shares the program's code, arena and threads; its input and output types are those
    sizes' shapes, made when first asked for (a decoder makes one of these per token)."""

    @property
    def input_types(self) -> dict[str, TensorType]:  # type: ignore[override]
        assert self.at is not None
        shapes = self.at.shapes
        return {
            n.name: TensorType(shapes.get(n.id, n.shape), n.dtype)  # type: ignore[arg-type]
            for n in self.graph.inputs
        }

    def save(self, path: str, key: Any = None) -> None:
        """Refused: this is the program for every size seen at some sizes; the
        SymbolicExecutable it came from saves it with every size it serves."""
        raise CodegenError(
            "this executable is a program for every size at one set of sizes: save the "
            "SymbolicExecutable it came from (codegen.build's result), which keeps them all"
        )

    @property
    def output_types(self) -> list[Type]:  # type: ignore[override]
        assert self.at is not None
        shapes = self.at.shapes
        every = self.__dict__["output_types"]  # the program's, at its capacity
        return [
            TensorType(shapes.get(node_id, t.shape), t.dtype) if isinstance(t, TensorType) else t
            for node_id, t in zip(self.graph.outputs, every, strict=True)
        ]


def _feed(name: str, value: Any, t: TensorType) -> np.ndarray:
    """One input as a C-contiguous array of the parameter's type (or a clear error)."""
    array = np.asarray(value)
    if str(array.dtype) != t.dtype:
        if array.dtype == object or array.dtype.kind in "USV":
            raise CodegenError(f"input '{name}' is {array.dtype}, expected {t.dtype}")
        with np.errstate(all="ignore"):
            cast = array.astype(t.dtype)
            back = cast.astype(array.dtype)
        same = (
            (back == array) | (np.isnan(back) & np.isnan(array))
            if array.dtype.kind in "fc"
            else back == array
        )
        if not np.all(same):
            raise CodegenError(
                f"input '{name}' is {array.dtype}, expected {t.dtype}, and casting would "
                f"change its values; convert it first (e.g. x.astype('{t.dtype}'))"
            )
        array = cast
    if array.shape != t.shape:
        raise CodegenError(f"input '{name}' has shape {array.shape}, expected {t.shape}")
    return np.require(array, requirements="C")
