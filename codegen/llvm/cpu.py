"""What the host CPU can do: code is compiled for it (objcompile: its name and features),
so a kernel may use an instruction where the host has it."""

from __future__ import annotations

import functools

from llvmlite import binding as llvm


@functools.cache
def host_has(feature: str) -> bool:
    """Whether this CPU has `feature`, in LLVM's spelling ("avx512vnni", "avx512vbmi")."""
    return bool(llvm.get_host_cpu_features().get(feature, False))
