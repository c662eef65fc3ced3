"""ONNX function ops: an operator without a converter whose schema defines it as a function
of other operators (Attention, RotaryEmbedding, SwiGLU, Mish, ...) is replaced by that
function's body, built by ONNX itself for the node's attributes and input types, and the
body's nodes are converted instead."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import FrontendError
from ...types import TensorType


def function_schema(node: Any, opset: int, onnx: Any) -> Any | None:
    """The node's schema at `opset` when ONNX defines the op as a function, else None."""
    if node.domain not in ("", "ai.onnx"):
        return None
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
    except Exception:  # not an operator of that opset
        return None
    if schema.has_function or schema.has_context_dependent_function:
        return schema
    return None


def expand(
    node: Any, types: list[TensorType | None], opset: int, onnx: Any, prefix: str
) -> list[Any]:
    """The nodes of `node`'s function body: the body's inputs and outputs renamed to the
    node's, its own values to `prefix` + name, attribute references bound to the node's."""
    schema = function_schema(node, opset, onnx)
    assert schema is not None
    body = _body(schema, node, types, opset, onnx)
    rename: dict[str, str] = {}
    for i, name in enumerate(body.input):
        rename[name] = node.input[i] if i < len(node.input) else ""
    for i, name in enumerate(body.output):
        rename[name] = node.output[i] if i < len(node.output) and node.output[i] else prefix + name
    given = _defaults(schema, body)
    given.update({a.name: a for a in node.attribute})
    nodes = []
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = prefix + (inner.name or inner.op_type)
        del copy.input[:], copy.output[:], copy.attribute[:]
        copy.input.extend(_renamed(n, rename, prefix) for n in inner.input)
        copy.output.extend(_renamed(n, rename, prefix) for n in inner.output)
        for attr in inner.attribute:
            if attr.type == attr.GRAPH:  # a body (Scan, If) reads the function's values
                bound = onnx.AttributeProto()
                bound.CopyFrom(attr)
                _rename_graph(bound.g, rename, prefix)
                copy.attribute.append(bound)
            elif not attr.ref_attr_name:
                copy.attribute.append(attr)
            elif attr.ref_attr_name in given:  # no value at all: the inner op's default
                bound = onnx.AttributeProto()
                bound.CopyFrom(given[attr.ref_attr_name])
                bound.name = attr.name
                copy.attribute.append(bound)
        nodes.append(copy)
    return nodes


def _defaults(schema: Any, body: Any) -> dict[str, Any]:
    """Attribute values the node may leave out: the function's own defaults, else the
    operator schema's."""
    out = {
        name: a.default_value
        for name, a in schema.attributes.items()
        if a.default_value is not None and a.default_value.type
    }
    out.update({a.name: a for a in body.attribute_proto})
    return out


def _rename_graph(graph: Any, rename: dict[str, str], prefix: str) -> None:
    """Every name in a body renamed as the function's own (so its reads of the function's
    values find them; its own names get the prefix too, consistently)."""
    for value in (*graph.input, *graph.output, *graph.value_info):
        value.name = _renamed(value.name, rename, prefix)
    for init in graph.initializer:
        init.name = _renamed(init.name, rename, prefix)
    for node in graph.node:
        node.input[:] = [_renamed(x, rename, prefix) for x in node.input]
        node.output[:] = [_renamed(x, rename, prefix) for x in node.output]
        for attr in node.attribute:
            if attr.type == attr.GRAPH:
                _rename_graph(attr.g, rename, prefix)


def _renamed(name: str, rename: dict[str, str], prefix: str) -> str:
    if not name:
        return ""
    return rename.get(name, prefix + name)


def _body(schema: Any, node: Any, types: list[TensorType | None], opset: int, onnx: Any) -> Any:
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if not versions:
            return schema.function_body
        function = onnx.FunctionProto()
        function.ParseFromString(schema.get_function_with_opset_version(max(versions)))
        return function
    versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    type_protos = [_type_proto(t, onnx).SerializeToString() for t in types]
    try:
        data = schema.get_context_dependent_function_with_opset_version(
            max(versions) if versions else opset, node.SerializeToString(), type_protos
        )
    except Exception as exc:  # ONNX's builder refuses the node (its own message)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FrontendError(f"ONNX cannot expand this function op: {first}") from None
    function = onnx.FunctionProto()
    function.ParseFromString(data)
    return function


def _type_proto(t: TensorType | None, onnx: Any) -> Any:
    if t is None:  # an absent optional input
        return onnx.TypeProto()
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype))
    return onnx.helper.make_tensor_type_proto(elem, list(t.shape))
