"""Frontends: ONNX to IRModule (`from_onnx`) and back (`to_onnx`). The `onnx` package is
imported only when a model is read or written."""

from __future__ import annotations

from . import (  # noqa: F401  (register more converters)
    onnx_control,
    onnx_grid,
    onnx_losses,
    onnx_more,
    onnx_quantize,
    onnx_resize,
    onnx_rnn,
    onnx_scan,
    onnx_tensor,
)
from .onnx import from_onnx, supported_ops
from .onnx_export import to_onnx

__all__ = ["from_onnx", "supported_ops", "to_onnx"]
