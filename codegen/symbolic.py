"""One executable for every shape of a program with symbolic dimensions.

`codegen.build` of a module whose inputs have size variables (`Tensor[(batch, seq), int64]`)
returns a `SymbolicExecutable`: it takes inputs of any consistent shape, binds the sizes
from them (a disagreement is one error naming the dimension, as in the interpreter), and
runs native code that serves them.

Where every group of the fused symbolic program lowers to a kernel with run-time extents,
that code is one program built for every size (codegen/plan/every_size.py), at a capacity:
the upper bounds of `codegen.size_bounds`, else each size rounded up to a power of two (at
least 16). A run at new sizes within the capacity then costs no compile and no Python work
beyond evaluating the shapes; sizes beyond it build the program again at a larger
capacity. Elsewhere (convolutions over symbolic image sizes, BLAS products that broadcast
their batch axes, control flow) each new set of sizes is a specialisation: the first run at
it compiles what its sizes change, and later runs reuse it; the most recently used
`capacity` specialisations stay.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from egraph_ir.dims import bind_sizes
from egraph_ir.errors import CodegenError, CompilerError, TypeInferenceError
from egraph_ir.module import IRModule
from egraph_ir.specialize import symbolic_names
from egraph_ir.types import TensorType, Type

from .artifact.write import save_symbolic
from .options import BuildOptions
from .runtime.buffers import OutputBuffers
from .runtime.executable import Executable
from .runtime.latency import Latency

log = logging.getLogger(__name__)

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
        compile_every_size: Callable[[Mapping[str, int]], Executable | None] | None = None,
        check_sizes: Callable[[Mapping[str, int]], bool] | None = None,
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
        # input shapes -> the executable last found for them (sizes checked then)
        self._by_shapes: dict[tuple[tuple[int, ...], ...], Executable] = {}
        self._compile_every_size = compile_every_size
        self._check_sizes = check_sizes  # is the program for every size right at these?
        self._sound: dict[Sizes, bool] = {}  # its answers so far
        self.for_every_size: Executable | None = None  # built for every size up to its own

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
            exe = self._from_every_size(dict(key))
        if exe is None:
            exe = self._compile(self._compile_static, dict(key))
        self._built[key] = exe
        while len(self._built) > self.capacity:
            _, evicted = self._built.popitem(last=False)
            self._by_shapes = {k: v for k, v in self._by_shapes.items() if v is not evicted}
        self._built.move_to_end(key)
        return exe

    def _compile(self, how: Callable[[Mapping[str, int]], Any], sizes: dict[str, int]) -> Any:
        t0 = time.perf_counter()
        try:
            exe = how(sizes)
        except TypeInferenceError as exc:
            raise CodegenError(f"at sizes {sizes}: {exc}") from None
        if exe is not None:  # None: refused before compiling anything
            self.compiles.append((tuple(sizes.items()), time.perf_counter() - t0))
        return exe

    def _from_every_size(self, sizes: dict[str, int]) -> Executable | None:
        """The program built for every size, at `sizes` (built now, or again at a larger
        capacity, when they exceed the one it has), or None where it cannot be."""
        if self.for_every_size is not None:
            view = self.for_every_size.at_sizes(sizes)
            if view is not None:
                return view if self._sound_at(sizes) else None
        if self._compile_every_size is None:
            return None
        capacity = self.capacity_for(sizes)
        exe = self._compile(self._compile_every_size, capacity)
        if exe is None or not exe.for_every_size:
            self._compile_every_size = None  # this program is specialised per size
            if exe is not None:
                self.adopt(capacity, exe)
            return exe if exe is not None and capacity == sizes else None
        self.for_every_size = exe
        self._built = OrderedDict((k, v) for k, v in self._built.items() if v.at is None)
        self._by_shapes.clear()
        view = exe.at_sizes(sizes)
        return view if view is not None and self._sound_at(sizes) else None

    def _sound_at(self, sizes: dict[str, int]) -> bool:
        """Does the program for every size compute what the program means at `sizes`?
        Where a shape inside it is 0 or 1 there (an empty axis some op refuses, a squeeze
        or broadcast of an axis of 1), the program is typed at them to say (an error
        where it is not well typed at them, as the interpreter's)."""
        if self._check_sizes is None:
            return True
        key: Sizes = tuple(sizes.items())
        if key not in self._sound:  # a program's meaning at sizes: the same for every build
            try:
                self._sound[key] = self._check_sizes(sizes)
            except TypeInferenceError as exc:
                raise CodegenError(f"at sizes {sizes}: {exc}") from None
        return self._sound[key]

    def prepare(self) -> None:
        """Build the program for every size now (at the capacity the smallest sizes give:
        the upper bounds of codegen.size_bounds, else 16 each), so the first run compiles
        nothing; where it cannot be built for every size, nothing is kept."""
        if self.for_every_size is None and self._compile_every_size is not None:
            lowest = {n: self.options.size_bounds.get(n, (1, 1))[0] for n in self.size_names}
            try:
                self._from_every_size(lowest)
            except CompilerError as exc:  # built, maybe, but not well typed at `lowest`
                log.info("at the lowest sizes: %s", exc)
        self._type_small_sizes()

    def _type_small_sizes(self) -> None:
        """Type the program now at the smallest sizes (each size at its lower bound and
        the two above it: an empty past, a sequence of one), where shapes inside it are 0
        or 1, so the first runs there (a decoder's first token) type nothing: a few
        milliseconds each, once per pattern of such shapes."""
        if self.for_every_size is None or self._check_sizes is None or len(self.size_names) > 3:
            return
        choices = []
        for name in self.size_names:
            low, high = self.options.size_bounds.get(name, (0, 1 << 62))
            choices.append([v for v in range(low, low + 3) if v <= high])
        for values in itertools.product(*choices):
            sizes = dict(zip(self.size_names, values, strict=True))
            with contextlib.suppress(CompilerError):  # ill-typed there: said when run there
                self._sound_at(sizes)

    def capacity_for(self, sizes: Mapping[str, int]) -> dict[str, int]:
        """The sizes a program built for every size is planned at, to serve `sizes`: the
        upper bounds given (codegen.size_bounds), else each size rounded up to a power of
        two, at least 16, and never below the capacity built before."""
        before = self.for_every_size.program if self.for_every_size is not None else None
        had = dict(zip(before.size_names, before.sizes, strict=True)) if before else {}
        capacity = {}
        for name in self.size_names:
            bound = self.options.size_bounds.get(name)
            if bound is not None:
                capacity[name] = bound[1]
                continue
            rounded = max(16, 1 << max(0, sizes[name] - 1).bit_length())
            capacity[name] = max(rounded, had.get(name, 0))
        return capacity

    def adopt(self, sizes: Mapping[str, int], exe: Executable) -> None:
        """Keep `exe` as the specialisation for `sizes` (a loaded one, say), or as the
        program for every size up to them where it is one."""
        key: Sizes = tuple((n, int(sizes[n])) for n in self.size_names)
        if exe.for_every_size:
            exe.serve_every_size(exe.program.symbolic_shapes)
            self.for_every_size = exe
            return
        self._built[key] = exe

    @property
    def specializations(self) -> dict[Sizes, Executable]:
        """The specialisations compiled so far that are kept, oldest use first."""
        return dict(self._built)

    # ------------------------------------------------------------ running
    def feeds(self, args: tuple[Any, ...], inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Inputs given by position, by name or as one dict, as a dict by name."""
        if not args and isinstance(inputs, dict):  # by keyword (a decoder's per-token
            return inputs  # path): the call's own dict
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
        """The executable that runs these inputs. Inputs of shapes seen before (a
        server's steady state, a decoder's earlier lengths) skip binding their sizes."""
        try:
            shapes = tuple(inputs[name].shape for name, _, _ in self._binding)
        except (KeyError, AttributeError):
            shapes = None
        exe = self._by_shapes.get(shapes) if shapes is not None else None
        if exe is not None:
            return exe
        exe = self.specialization(**self.sizes_of(inputs))
        if shapes is not None:
            if len(self._by_shapes) >= self.capacity:
                self._by_shapes.clear()
            self._by_shapes[shapes] = exe
        return exe

    def run(self, /, *args: Any, **inputs: Any) -> Any:
        """Run on numpy inputs of any consistent shape (as Executable.run takes them)."""
        feeds = self.feeds(args, inputs)
        return self.for_inputs(feeds).run(**feeds)  # by keyword: the executable's fast path

    __call__ = run

    def run_into(
        self, buffers: OutputBuffers | Mapping[str, np.ndarray], /, *args: Any, **inputs: Any
    ) -> Any:
        """Run as `run` does, the outputs in kept storage (Executable.run_into): a
        decoder's growing presents, for one, are written without new memory each step."""
        feeds = self.feeds(args, inputs)
        return self.for_inputs(feeds).run_into(buffers, **feeds)

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
        compiling (the program for every size once, not once per size it ran at). Passes
        given to build as extra_passes are not kept."""
        blobs = []
        kept = [(s, e) for s, e in self._built.items() if e.at is None]
        every = self.for_every_size
        if every is not None:
            kept.append(
                (tuple(zip(every.program.size_names, every.program.sizes, strict=True)), every)
            )
        with tempfile.TemporaryDirectory() as tmp:
            for k, (sizes, exe) in enumerate(kept):
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
        every = self.for_every_size
        if every is not None:
            pairs = zip(every.program.size_names, every.program.sizes, strict=True)
            capacity = ", ".join(f"{n}={v}" for n, v in pairs)
            built = f"one program for every size up to {capacity}"
        else:
            built = f"{sum(e.at is None for e in self._built.values())} specialisation(s) compiled"
        how = "once" if self.optimised_once else "per specialisation"
        return (
            f"<SymbolicExecutable ({ins}) -> ({outs}); sizes {', '.join(self.size_names)}; "
            f"{built}; optimised {how}>"
        )
