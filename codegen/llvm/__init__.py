"""LLVM code generation: loop IR to llvmlite.ir (emit.py), vector math (mathlib.py), JIT."""

from __future__ import annotations

from .emit import emit_module
from .jit import JitLibrary

__all__ = ["JitLibrary", "emit_module"]
