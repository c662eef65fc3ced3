"""The standard passes, each registered under its class name."""

from __future__ import annotations

from .dead_code import DeadCodeElimination
from .infer_type import InferType
from .print_ir import PrintIR

__all__ = ["DeadCodeElimination", "InferType", "PrintIR"]
