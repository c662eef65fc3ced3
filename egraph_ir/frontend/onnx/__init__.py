"""ONNX to IRModule (`from_onnx`) and back (`to_onnx`).

importer.py walks the graph and calls the converter registered for each op type (node.py:
`converter`, `Node`); the converters live by ONNX family (elementwise, activations, nn,
volume, shape, reduce, control, rnn, resize, grid, quantize, losses), function ops expand
into their bodies (functions.py), and export/ writes IR back to ONNX. The `onnx` package
is imported only when a model is read or written.
"""

from __future__ import annotations

from . import (  # noqa: F401  (each family registers its converters)
    activations,
    control,
    elementwise,
    grid,
    losses,
    nn,
    qoperator,
    quantize,
    reduce,
    resize,
    rnn,
    shape,
    volume,
)
from .export.model import to_onnx
from .importer import from_onnx
from .node import CONVERTERS, Node, converter, supported_ops

__all__ = ["CONVERTERS", "Node", "converter", "from_onnx", "supported_ops", "to_onnx"]
