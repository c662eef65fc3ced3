"""JIT: optimise a module at O3 for the host CPU (name and features) and load it with MCJIT.

`llvm.initialize()` raises in llvmlite 0.50; only the native target and asm printer are
initialised. Kernels carry "prefer-vector-width"="512": LLVM picks 256-bit vectors on this
CPU otherwise, which halves compute-bound loops (research/perf/FINDINGS.md §4).
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import llvmlite.binding as llvm

_READY = False


def _init() -> None:
    global _READY
    if not _READY:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _READY = True


def host_target_machine() -> Any:
    _init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        jit=True,
    )


class JitLibrary:
    """A compiled module; `function(name, n_buffers)` gives a ctypes callable."""

    def __init__(self, ir_text: str) -> None:
        _init()
        t0 = time.perf_counter()
        self.tm = host_target_machine()
        mod = llvm.parse_assembly(ir_text)
        mod.verify()
        mod.triple = self.tm.triple
        mod.data_layout = str(self.tm.target_data)
        options = llvm.create_pipeline_tuning_options(speed_level=3)
        options.loop_vectorization = True
        options.slp_vectorization = True
        options.loop_interleaving = True
        options.loop_unrolling = True
        builder = llvm.create_pass_builder(self.tm, options)
        builder.getModulePassManager().run(mod, builder)
        t1 = time.perf_counter()
        self.optimized_ir = str(mod)
        self.engine = llvm.create_mcjit_compiler(mod, self.tm)
        self.engine.finalize_object()
        self.module = mod
        self.seconds = {"optimise": t1 - t0, "jit": time.perf_counter() - t1}

    def function(self, name: str, n_buffers: int) -> Any:
        address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(name)
        signature = ctypes.CFUNCTYPE(
            None, *([ctypes.c_void_p] * n_buffers), ctypes.c_int64, ctypes.c_int64
        )
        return signature(address)

    def assembly(self) -> str:
        return str(self.tm.emit_assembly(self.module))
