"""Frontends: ONNX to IRModule (`from_onnx`) and back (`to_onnx`); see onnx/ for the
converter API (`converter`, `Node`) and the families of converters."""

from __future__ import annotations

from .onnx import converter, from_onnx, supported_ops, to_onnx

__all__ = ["converter", "from_onnx", "supported_ops", "to_onnx"]
