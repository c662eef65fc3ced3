"""codegen: from optimised IR to native code (layer 3; may import every other layer).

`build(mod, target="llvm", params=None)` runs the standard pipeline and FuseOps under the
current PassContext, lowers each fused group to loops (or a library anchor plus a JIT
epilogue), plans memory, emits LLVM with llvmlite, JIT-compiles it and returns an
`Executable`, which `save` writes to one file that `load` runs elsewhere without
compiling. A program with symbolic dimensions gives a `SymbolicExecutable` (symbolic.py),
which runs every consistent shape. The `egc` command line and the compile job live above
it, in the `egc` package.
"""

from __future__ import annotations

from .artifact.check import new_signing_key, public_key
from .artifact.load import load
from .build import Executable, KernelTime, Profile, SymbolicExecutable, bind_params, build
from .external import list_externals, register_external, write_outputs
from .external.host import ExternalFallbackWarning
from .measure.placement_costs import measured_cost
from .measure.tune import TuneReport, tune
from .plan.memory import list_memory_planners, register_memory_planner
from .runtime.buffers import OutputBuffers

__all__ = [
    "list_memory_planners",
    "register_memory_planner",
    "Executable",
    "ExternalFallbackWarning",
    "KernelTime",
    "OutputBuffers",
    "Profile",
    "SymbolicExecutable",
    "bind_params",
    "build",
    "list_externals",
    "write_outputs",
    "load",
    "measured_cost",
    "new_signing_key",
    "public_key",
    "register_external",
    "TuneReport",
    "tune",
]
