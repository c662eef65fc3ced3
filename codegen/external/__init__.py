"""External code generators: regions partitioned for another target (PartitionGraph's
`Compiler=T` functions) are compiled by T's registered code generator.

    def build_region(fn: ir.Function, threads: int) -> Runner: ...
    codegen.register_external("mytarget", build_region)

A code generator receives the region's function (typed; composite calls inside it as
MergeComposite made them) and the executable's thread budget, and returns a runner:
`runner(inputs, outputs)` reads the input arrays and writes every output array in place
(they are the executable's own buffers, so a target that can bind memory needs no copy).
`outputs` holds one array per tensor of the region's result, nested tuples flattened in
order; `write_outputs(outputs, value)` stores a value as the interpreter returns it
(`(a, (b, c))` into three buffers), and the executable hands the nesting back to its caller.
A code generator that raises hands its region back to the host with a warning; a region of
a target without a code generator goes to the host the same way. Two ship with the project:
`onnxruntime` and `blas`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from egraph_ir.compare import leaves
from egraph_ir.errors import CodegenError, did_you_mean

Runner = Callable[[list[np.ndarray], list[np.ndarray]], None]
BuildRegion = Callable[..., Runner]  # (fn, threads) or (fn, threads, options=...)

_EXTERNAL: dict[str, BuildRegion] = {}


def write_outputs(outputs: list[np.ndarray], value: object) -> None:
    """Store a region's result (an array or nested tuples of arrays, as `interpret`
    returns it) into its output buffers, which hold the tensors flattened in order."""
    tensors = leaves(value)
    if len(tensors) != len(outputs):
        raise CodegenError(
            f"a region's result has {len(tensors)} tensor(s) for {len(outputs)} output buffer(s)"
        )
    for buffer, leaf in zip(outputs, tensors, strict=True):
        buffer[...] = leaf


def register_external(name: str, build_fn: BuildRegion | None, override: bool = False) -> None:
    """Register the code generator of target `name` (None removes it)."""
    if build_fn is None:
        _EXTERNAL.pop(name, None)
        return
    if not callable(build_fn):
        raise CodegenError(f"register_external('{name}'): the code generator is not callable")
    if name in _EXTERNAL and not override:
        raise CodegenError(f"external target '{name}' is already registered (override=True)")
    _EXTERNAL[name] = build_fn


def get_external(name: str) -> BuildRegion:
    if name not in _EXTERNAL:
        raise CodegenError(
            f"no code generator for external target '{name}'{did_you_mean(name, _EXTERNAL)}; "
            f"registered: {', '.join(sorted(_EXTERNAL))}"
        )
    return _EXTERNAL[name]


def list_externals() -> list[str]:
    return sorted(_EXTERNAL)


def _register_shipped() -> None:
    from . import blas_region, onnxruntime_region

    register_external("onnxruntime", onnxruntime_region.build)
    register_external("blas", blas_region.build)  # egc.control (If): codegen/build.py


_register_shipped()

__all__ = ["BuildRegion", "Runner", "get_external", "list_externals", "register_external"]
