"""The ONNX graph an export builds (ExportGraph), the exporter registry, and the helpers the
exporters share (scalars, reshapes, per-channel vectors, normalisations, pooling attributes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ....errors import FrontendError
from ....expr import Call
from ....op.nn import norm_padding
from ....registry import Op
from ....types import TensorType

OPSET = 17


class ExportGraph:
    """The ONNX graph being built: nodes, initialisers and fresh names."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, value: Any, dtype: str | None = None, hint: str = "c") -> str:
        array = np.asarray(value, dtype=dtype)
        name = self.name(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def node(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: Any) -> list[str]:
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, names, **attrs))
        return names

    def one(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        return self.node(op_type, inputs, **attrs)[0]


def out_type(call: Call) -> TensorType:
    t = call.checked_type
    assert isinstance(t, TensorType)
    return t


def arg_type(call: Call, k: int) -> TensorType:
    t = call.args[k].checked_type
    assert isinstance(t, TensorType)
    return t


def scalar(g: ExportGraph, value: float, dtype: str) -> str:
    """A scalar constant; for integers, a bound beyond the dtype's range is its limit
    (clip to -6 on uint8 is clip to 0)."""
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        value = min(max(value, info.min), info.max)
    return g.const(np.array(value, dtype=dtype))


def reshape(g: ExportGraph, x: str, shape: tuple[int, ...]) -> str:
    return g.one("Reshape", [x, g.const(np.array(shape, dtype=np.int64), hint="shape")])


def along(g: ExportGraph, vec: str, axis: int, ndim: int) -> str:
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return reshape(g, vec, tuple(shape))


def affine(g: ExportGraph, y: str, call: Call, ins: list[str], axis: int) -> str:
    ndim = arg_type(call, 0).ndim  # the data's rank (batch_norm's result is a tuple)
    if call.attrs["scale"]:
        y = g.one("Mul", [y, along(g, ins[1], axis, ndim)])
    if call.attrs["center"]:
        y = g.one("Add", [y, along(g, ins[2], axis, ndim)])
    return y


def normalise(g: ExportGraph, x: str, axes: list[int], eps: float, dtype: str) -> str:
    """(x - mean) / sqrt(var + eps) over axes (a reference formula, for norms ONNX lacks)."""
    mean = g.one("ReduceMean", [x], axes=axes, keepdims=1)
    centred = g.one("Sub", [x, mean])
    var = g.one("ReduceMean", [g.one("Mul", [centred, centred])], axes=axes, keepdims=1)
    std = g.one("Sqrt", [g.one("Add", [var, scalar(g, eps, dtype)])])
    return g.one("Div", [centred, std])


def pool_attrs(call: Call, with_dilation: bool = True) -> dict[str, Any]:
    attrs = call.attrs
    size = attrs["pool_size"]
    size = (size, size) if isinstance(size, int) else tuple(size)
    strides = attrs["strides"]
    strides = (strides, strides) if isinstance(strides, int) else tuple(strides)
    pt, pl, pb, pr = norm_padding(attrs["padding"])
    out: dict[str, Any] = dict(
        kernel_shape=list(size), strides=list(strides), pads=[pt, pl, pb, pr],
        ceil_mode=int(attrs["ceil_mode"]),
    )  # fmt: skip
    dilation = attrs["dilation"]
    dilation = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
    if with_dilation:
        out["dilations"] = list(dilation)
    elif dilation != (1, 1):
        raise FrontendError(f"avg_pool2d with dilation {dilation} needs ONNX opset 19")
    return out


def axes_of(axis: Any, ndim: int) -> list[int]:
    """An axis attribute (None: all, an int, or a tuple) as sorted non-negative axes."""
    if axis is None:
        return list(range(ndim))
    return sorted({int(a) % ndim for a in ((axis,) if isinstance(axis, int) else axis)})


def pair(value: Any) -> list[int]:
    return [value, value] if isinstance(value, int) else list(value)


Exporter = Callable[["ExportGraph", Call, list[str]], list[str]]


EXPORTERS: dict[str, Exporter] = {}


def exporter(*names: str) -> Callable[[Exporter], Exporter]:
    """Register the ONNX form of these ops: a function from a typed call and the names of
    its inputs to the names of its outputs, adding nodes to the graph."""

    def register(fn: Exporter) -> Exporter:
        for n in names:
            EXPORTERS[n] = fn
        return fn

    return register


def op_name_of(call: Call) -> str:
    assert isinstance(call.op, Op)
    return call.op.name


def move_to_1(axis: int, ndim: int) -> list[int]:
    return [0, axis] + [k for k in range(1, ndim) if k != axis]


def elem_type(onnx: Any, dtype: str) -> int:
    return int(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
