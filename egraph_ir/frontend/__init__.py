"""Frontends: other formats to IRModule. `onnx` is imported only when a model is read."""

from __future__ import annotations

from .onnx import from_onnx, supported_ops

__all__ = ["from_onnx", "supported_ops"]
