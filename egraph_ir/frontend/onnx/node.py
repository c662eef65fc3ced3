"""The converter API: `Node` (one ONNX node, its inputs as IR and attributes as Python
values) and `converter(*op_types)`, which registers a function from a Node to IR.

A converter returns one expression or a list (one per ONNX output). Users register their
own converters exactly like the built-in families in this package do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ...errors import ConstantInputError, FrontendError
from ...expr import Constant, Expr
from ...infer import infer_new_nodes
from ...types import TensorType
from ...visitor import free_vars
from .ort_islands import FLOAT_SUFFIX, UINT8_SUFFIX, FloatIslands
from .sizes import SizeValues

Converter = Callable[["Node"], Expr | list[Expr]]


class Scope(Protocol):
    """What a node reads of the graph being imported (importer.py's Importer): the values
    defined so far by name, the onnx module, the opset, and subgraph import (If, Loop)."""

    onnx: Any
    opset: int
    env: dict[str, Expr | SizeValues]
    islands: FloatIslands

    def run_graph(self, graph: Any, bindings: dict[str, Expr]) -> list[Expr]: ...


CONVERTERS: dict[str, Converter] = {}


def op_key(proto: Any) -> str:
    """The name a converter is registered under: the op type in the default domain,
    `domain.OpType` in any other (`converter("com.example.MyOp")`)."""
    domain, op_type = _text(proto.domain), _text(proto.op_type)
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def _text(value: str | bytes) -> str:
    """A proto string field; protobuf hands back bytes when they are not valid UTF-8."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def converter(*names: str) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of these ops (see op_key): it gets
    a Node and returns IR (a list for several outputs). A later registration of a name
    replaces the earlier one, so a user can also override a built-in converter."""

    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = fn
        return fn

    return register


def supported_ops() -> list[str]:
    return sorted(CONVERTERS)


class Node:
    """One ONNX node: its inputs as IR, its attributes as Python values."""

    def __init__(self, importer: Scope, proto: Any, index: int) -> None:
        self.importer, self.proto, self.opset = importer, proto, importer.opset
        self.index = index
        self.op_type = proto.op_type
        self.where = f"node '{proto.name or f'#{index}'}' ({proto.op_type})"
        helper = importer.onnx.helper
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        for k, v in self.attrs.items():
            if isinstance(v, bytes):
                self.attrs[k] = v.decode()
            elif isinstance(v, importer.onnx.TensorProto):
                self.attrs[k] = importer.onnx.numpy_helper.to_array(v)

    def raw(self, i: int) -> Expr | SizeValues | None:
        """Input i as the importer holds it: IR, or shape values (sizes.py)."""
        names = self.proto.input
        if i >= len(names) or not names[i]:
            return None
        name = names[i]
        if self.importer.islands.reads_float(self.proto, i):
            name += FLOAT_SUFFIX  # its DequantizeLinear as arithmetic (ort_islands.py)
        elif self.importer.islands.reads_uint8_zero(self.proto, i):
            name += UINT8_SUFFIX  # ONNX Runtime's int8 -> uint8 rewrite (ort_islands.py)
        if name not in self.importer.env:
            raise FrontendError(f"input '{names[i]}' is not defined before this node")
        return self.importer.env[name]

    def input(self, i: int) -> Expr | None:
        value = self.raw(i)
        return value.expr() if isinstance(value, SizeValues) else value

    def x(self, i: int = 0) -> Expr:
        e = self.input(i)
        if e is None:
            raise FrontendError(f"input {i} is required")
        return e

    def inputs(self) -> list[Expr]:
        return [self.x(i) for i in range(len(self.proto.input)) if self.proto.input[i]]

    def const(self, i: int, default: Any = None) -> Any:
        """A constant input's value (shapes, axes, bounds); None when absent. Sizes
        computed from symbolic shapes come as an object array of ints and Dims."""
        e = self.raw(i)
        if e is None:
            return default
        if isinstance(e, SizeValues):
            return e.data  # ints and Dims (sizes.dims_of reads them as a shape)
        if not isinstance(e, Constant):
            raise ConstantInputError(
                f"input {i} ('{self.proto.input[i]}') must be a constant: it sets a static "
                "attribute",
                self.proto.input[i],
                tuple(v.name_hint for v in free_vars(e)),
            )
        return e.data

    def type(self, i: int = 0) -> TensorType:
        t = infer_new_nodes(self.x(i)).checked_type
        if not isinstance(t, TensorType):
            raise FrontendError(f"input {i} is not a tensor")
        return t

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)


def axes_of(n: Node, index: int) -> list[int] | None:
    """Axes from the attribute (older opsets) or the constant input `index` (newer)."""
    if "axes" in n.attrs:
        return [int(a) for a in n.attrs["axes"]]
    value = n.const(index)
    return None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]


def scalar(value: float | int, dtype: str) -> Constant:
    """A scalar constant of the given dtype."""
    return Constant(np.asarray(value, dtype=dtype))


def scalar_like(n: Node, value: float) -> Constant:
    """A scalar constant of the node's first input's dtype."""
    return scalar(value, n.type().dtype)
