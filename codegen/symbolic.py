"""One executable for every shape of a program with symbolic dimensions.

`codegen.build` of a module whose inputs have size variables (`Tensor[(batch, seq), int64]`)
returns a `SymbolicExecutable`: it takes inputs of any consistent shape, binds the sizes
from them (a disagreement is one error naming the dimension, as in the interpreter), and
runs native code compiled for those sizes. Today that code is a specialisation: the first
run at a new set of sizes compiles the program for them (the rule pipeline ran once on
the symbolic program; a specialisation fuses, lowers and JIT-compiles), and later runs at
those sizes reuse it; the most recently used
`capacity` specialisations stay. Kernels that take their extents at run time (issue #49)
will replace the per-shape compile without changing this interface.
"""

from __future__ import annotations

import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from egraph_ir.dims import bind_sizes
from egraph_ir.errors import CodegenError, TypeInferenceError
from egraph_ir.module import IRModule
from egraph_ir.specialize import symbolic_names
from egraph_ir.types import TensorType, Type

from .artifact.write import save_symbolic
from .options import BuildOptions
from .runtime.executable import Executable
from .runtime.latency import Latency

Sizes = tuple[tuple[str, int], ...]  # (name, value) in the order of size_names


class SymbolicExecutable:
    """A compiled module with size variables: call it (or `run`) on inputs of any
    consistent shape; `input_types` and `output_types` show the dimensions by name."""

    def __init__(
        self,
        module: IRModule,
        compile_static: Callable[[Mapping[str, int]], Executable],
        outputs: tuple[list[Type], list[str]],
        options: BuildOptions,
        optimised_once: bool = False,
        capacity: int = 16,
    ) -> None:
        main = module["main"]
        self.module = module  # the symbolic program, as imported and typed
        self.input_types: dict[str, TensorType] = {
            p.name_hint: p.checked_type  # type: ignore[misc]
            for p in main.params
        }
        self.output_types, self.output_names = outputs
        self.size_names = symbolic_names(main)
        self._binding = [  # per input: its dimensions and how an error names it
            (name, t.shape, f"input '{name}' ({t})") for name, t in self.input_types.items()
        ]
        self.options = options  # how each specialisation is built
        # the rule pipeline ran once, on the symbolic program (else once per specialisation)
        self.optimised_once = optimised_once
        self.capacity = capacity
        self.compiles: list[tuple[Sizes, float]] = []  # each specialisation and its seconds
        self._compile_static = compile_static
        self._built: OrderedDict[Sizes, Executable] = OrderedDict()
        self._last: tuple[tuple[tuple[int, ...], ...], Executable] | None = None

    # ------------------------------------------------------------ sizes
    def sizes_of(self, inputs: Mapping[str, Any]) -> dict[str, int]:
        """The size variables the inputs' shapes give (checked against each other)."""
        missing = [where for name, _, where in self._binding if name not in inputs]
        if missing:
            raise CodegenError(f"missing {', '.join(missing)}")
        try:
            sizes = bind_sizes(
                (dims, np.shape(inputs[name]), where) for name, dims, where in self._binding
            )
        except TypeInferenceError as exc:
            raise CodegenError(str(exc)) from None
        for name, (low, high) in self.options.size_bounds.items():
            if not low <= sizes[name] <= high:
                raise CodegenError(
                    f"size {name} is {sizes[name]} here, outside its bounds {low}..{high} "
                    "(codegen.size_bounds, set when the program was built)"
                )
        return sizes

    def specialization(self, **sizes: int) -> Executable:
        """The native code for these sizes: compiled now unless it already is (warm a
        server up with the sizes it will see: `exe.specialization(batch=1, seq=128)`)."""
        unknown = sorted(set(sizes) - set(self.size_names))
        missing = [n for n in self.size_names if n not in sizes]
        if unknown or missing:
            raise CodegenError(
                f"sizes {dict(sizes)}: the program's size variables are "
                f"{', '.join(self.size_names)}; give each one"
            )
        key: Sizes = tuple((n, int(sizes[n])) for n in self.size_names)
        exe = self._built.get(key)
        if exe is None:
            t0 = time.perf_counter()
            try:
                exe = self._compile_static(dict(key))
            except TypeInferenceError as exc:
                raise CodegenError(f"at sizes {dict(key)}: {exc}") from None
            self.compiles.append((key, time.perf_counter() - t0))
            self._built[key] = exe
            while len(self._built) > self.capacity:
                self._built.popitem(last=False)
        self._built.move_to_end(key)
        return exe

    def adopt(self, sizes: Mapping[str, int], exe: Executable) -> None:
        """Keep `exe` as the specialisation for `sizes` (a loaded one, say)."""
        key: Sizes = tuple((n, int(sizes[n])) for n in self.size_names)
        self._built[key] = exe

    @property
    def specializations(self) -> dict[Sizes, Executable]:
        """The specialisations compiled so far that are kept, oldest use first."""
        return dict(self._built)

    # ------------------------------------------------------------ running
    def feeds(self, args: tuple[Any, ...], inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs given by position, by name or as one dict, as a dict by name."""
        names = list(self.input_types)
        if len(args) == 1 and isinstance(args[0], Mapping):
            inputs, args = {**args[0], **inputs}, ()
        if len(args) > len(names):
            raise CodegenError(f"run takes {len(names)} input(s), got {len(args)}")
        clash = sorted(set(names[: len(args)]) & set(inputs))
        if clash:
            raise CodegenError(f"input(s) {clash} given both by position and by name")
        return {**dict(zip(names, args, strict=False)), **inputs}

    def for_inputs(self, inputs: Mapping[str, Any]) -> Executable:
        """The specialisation that runs these inputs. Inputs of the shapes the last run
        had (a server's steady state) skip binding their sizes again."""
        try:
            shapes = tuple(inputs[name].shape for name, _, _ in self._binding)
        except (KeyError, AttributeError):
            shapes = None
        if shapes is not None and self._last is not None and self._last[0] == shapes:
            return self._last[1]
        exe = self.specialization(**self.sizes_of(inputs))
        if shapes is not None:
            self._last = (shapes, exe)
        return exe

    def run(self, /, *args: Any, **inputs: Any) -> Any:
        """Run on numpy inputs of any consistent shape (as Executable.run takes them)."""
        feeds = self.feeds(args, inputs)
        return self.for_inputs(feeds).run(**feeds)  # by keyword: the executable's fast path

    __call__ = run

    def run_dict(self, /, *args: Any, **inputs: Any) -> dict[str, np.ndarray]:
        feeds = self.feeds(args, inputs)
        return self.for_inputs(feeds).run_dict(**feeds)

    def profile(self, inputs: Mapping[str, Any], repeats: int = 10) -> Any:
        """Executable.profile of the specialisation these inputs run (at their sizes)."""
        return self.for_inputs(inputs).profile(inputs, repeats)

    def benchmark(
        self,
        inputs: Mapping[str, Any],
        repeats: int = 100,
        warmup: int = 5,
        duration: float | None = None,
    ) -> Latency:
        """Executable.benchmark at the inputs' sizes (compiling first, untimed)."""
        return self.for_inputs(inputs).benchmark(inputs, repeats, warmup, duration)

    def save(self, path: str, key: Any = None) -> None:
        """One file that `codegen.load` turns into a SymbolicExecutable again: the program,
        to compile other sizes, and every kept specialisation, which loads without
        compiling. Passes given to build as extra_passes are not kept."""
        blobs = []
        with tempfile.TemporaryDirectory() as tmp:
            for k, (sizes, exe) in enumerate(self._built.items()):
                member = Path(tmp) / f"{k}.egc"
                exe.save(str(member))
                blobs.append((dict(sizes), member.read_bytes()))
        save_symbolic(path, str(self.module), blobs, self.options, key)

    # ------------------------------------------------------------ inspecting
    def latest(self) -> Executable:
        """The specialisation used last (what profiles, reports and drawings show)."""
        if not self._built:
            raise CodegenError(
                "no specialisation is compiled yet: run the program or call specialization()"
            )
        return next(reversed(self._built.values()))

    @property
    def optimized_module(self) -> IRModule | None:
        """The optimised IR of the specialisation used last."""
        return self.latest().optimized_module

    @property
    def threads(self) -> int:
        return self.options.threads

    def outputs(self) -> tuple[list[Type], list[str]]:
        return self.output_types, self.output_names

    def __repr__(self) -> str:
        ins = ", ".join(f"{k}: {t}" for k, t in self.input_types.items())
        outs = ", ".join(
            f"{n}: {t}" for n, t in zip(self.output_names, self.output_types, strict=True)
        )
        return (
            f"<SymbolicExecutable ({ins}) -> ({outs}); sizes {', '.join(self.size_names)}; "
            f"{len(self._built)} specialisation(s) compiled; optimised "
            f"{'once' if self.optimised_once else 'per specialisation'}>"
        )
