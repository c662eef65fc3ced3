"""What the host CPU can do: code is compiled for it (objcompile: its name and features),
so a kernel may use an instruction where the host has it."""

from __future__ import annotations

import functools

from llvmlite import binding as llvm

from egraph_ir.measured import native_16_lanes


@functools.cache
def host_has(feature: str) -> bool:
    """Whether this CPU has `feature`, in LLVM's spelling ("avx512vnni", "avx512vbmi")."""
    return bool(llvm.get_host_cpu_features().get(feature, False))


@functools.cache
def accumulator_budget() -> int:
    """16-lane accumulators a kernel's register block may hold: 24 of the 32 AVX-512
    registers, else 6 (12 of the 16 AVX2 registers: a 16-lane vector takes two)."""
    return 24 if native_16_lanes() else 6
