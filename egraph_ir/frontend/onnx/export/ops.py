"""The ONNX form of each op (`@exporter`): one function per op family, from a typed call and
its input names to its output names."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ....errors import FrontendError
from ....expr import Call
from ....op.layout import WINOGRAD_FIXED, transform_steps
from ....op.nn import norm_padding
from ....types import TensorType, TupleType
from .graph import (
    EXPORTERS,
    ExportGraph,
    affine,
    along,
    arg_type,
    axes_of,
    elem_type,
    exporter,
    move_to_1,
    normalise,
    op_name_of,
    out_type,
    pair,
    pool_attrs,
    reshape,
    scalar,
)

Converter = Callable[[ExportGraph, Call, list[str]], list[str]]


UNARY = {
    "abs": "Abs", "ceil": "Ceil", "cos": "Cos", "erf": "Erf", "exp": "Exp", "floor": "Floor",
    "log": "Log", "negative": "Neg", "relu": "Relu", "round": "Round", "sigmoid": "Sigmoid",
    "sign": "Sign", "sin": "Sin", "sqrt": "Sqrt", "tanh": "Tanh", "logical_not": "Not",
}  # fmt: skip


BINARY = {
    "add": "Add", "subtract": "Sub", "multiply": "Mul", "divide": "Div", "power": "Pow",
    "maximum": "Max", "minimum": "Min", "equal": "Equal", "greater": "Greater",
    "greater_equal": "GreaterOrEqual", "less": "Less", "less_equal": "LessOrEqual",
    "logical_and": "And", "logical_or": "Or",
}  # fmt: skip


REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin",
          "prod": "ReduceProd"}  # fmt: skip


RESHAPES = ("reshape", "flatten", "squeeze", "expand_dims")


CREATION = ("full", "ones", "zeros", "full_like", "ones_like", "zeros_like")


def convert(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    """One op call as ONNX nodes; the names of its outputs."""
    name = op_name_of(call)
    if name in UNARY:
        return g.node(UNARY[name], ins)
    if name in BINARY:
        return g.node(BINARY[name], ins)
    export = EXPORTERS.get(name)
    if export is None:
        raise FrontendError(f"no ONNX form for op '{name}'")
    return export(g, call, ins)


@exporter(*RESHAPES)
def _reshapes(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return [reshape(g, ins[0], out_type(call).shape)]


@exporter(*CREATION)
def _creation(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = op_name_of(call), call.attrs
    out = out_type(call)
    assert out is not None
    value = attrs.get("fill_value", 1 if "ones" in op_name else 0)
    return [g.const(np.full(out.shape, value, dtype=out.dtype))]


@exporter(*REDUCE)
def _reduce(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = op_name_of(call), call.attrs
    axes = axes_of(attrs["axis"], arg_type(call, 0).ndim)
    keep = int(attrs["keepdims"])
    if not axes:  # over no axis (a scalar, or axis=[]): every element is its own result
        return g.node("Identity", ins)
    if op_name == "sum":
        return g.node("ReduceSum", [ins[0], g.const(np.array(axes, np.int64))], keepdims=keep)
    return g.node(REDUCE[op_name], ins, axes=axes, keepdims=keep)


@exporter("fmod")
def _fmod(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Mod", ins, fmod=1)


@exporter("mod")
def _mod(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    if out_type(call).dtype.startswith("float"):  # ONNX's Mod needs fmod=1 on floats
        floor = g.one("Floor", [g.one("Div", ins)])
        return g.node("Sub", [ins[0], g.one("Mul", [floor, ins[1]])])
    return g.node("Mod", ins, fmod=0)


@exporter("dropout")
def _dropout(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    x = arg_type(call, 0)
    return [g.one("Identity", ins), g.const(np.ones(x.shape, x.dtype))]


@exporter("not_equal")
def _not_equal(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Not", [g.one("Equal", ins)])


@exporter("rsqrt")
def _rsqrt(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Reciprocal", [g.one("Sqrt", ins)])


@exporter("where")
def _where(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Where", ins)


@exporter("leaky_relu")
def _leaky_relu(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("LeakyRelu", ins, alpha=float(attrs["alpha"]))


@exporter("gelu")
def _gelu(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    v, dtype = ins[0], arg_type(call, 0).dtype
    if attrs["approximate"] == "tanh":
        cube = g.one("Mul", [v, g.one("Mul", [v, v])])
        inner = g.one("Add", [v, g.one("Mul", [cube, scalar(g, 0.044715, dtype)])])
        scaled = g.one("Mul", [inner, scalar(g, math.sqrt(2 / math.pi), dtype)])
        gate = g.one("Add", [g.one("Tanh", [scaled]), scalar(g, 1.0, dtype)])
    else:
        erf = g.one("Erf", [g.one("Div", [v, scalar(g, math.sqrt(2.0), dtype)])])
        gate = g.one("Add", [erf, scalar(g, 1.0, dtype)])
    return g.node("Mul", [g.one("Mul", [v, gate]), scalar(g, 0.5, dtype)])


@exporter("clip")
def _clip(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    dtype = arg_type(call, 0).dtype
    lo, hi = scalar(g, attrs["a_min"], dtype), scalar(g, attrs["a_max"], dtype)
    return g.node("Clip", [ins[0], lo, hi])


@exporter("cast")
def _cast(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("Cast", ins, to=elem_type(g.onnx, attrs["dtype"]))


@exporter("dense")
def _dense(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    if arg_type(call, 0).ndim == 2:
        return g.node("Gemm", ins, transB=1)
    return g.node("MatMul", [ins[0], g.one("Transpose", [ins[1]], perm=[1, 0])])


@exporter("matmul")
def _matmul(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("MatMul", ins)


@exporter("batch_matmul")
def _batch_matmul(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    a, b = ins
    for k, flag in ((0, "transpose_a"), (1, "transpose_b")):
        if attrs[flag]:
            nd = arg_type(call, k).ndim
            perm = [*range(nd - 2), nd - 1, nd - 2]
            if k == 0:
                a = g.one("Transpose", [a], perm=perm)
            else:
                b = g.one("Transpose", [b], perm=perm)
    return g.node("MatMul", [a, b])


@exporter("bias_add")
def _bias_add(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("Add", [ins[0], along(g, ins[1], attrs["axis"], arg_type(call, 0).ndim)])


@exporter("conv2d")
def _conv2d(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    pt, pl, pb, pr = norm_padding(attrs["padding"])
    return g.node(
        "Conv", ins, strides=pair(attrs["strides"]), pads=[pt, pl, pb, pr],
        dilations=pair(attrs["dilation"]), group=int(attrs["groups"]),
    )  # fmt: skip


def _layout_steps(g: ExportGraph, name: str, shape: tuple[int, ...], src: str, dst: str) -> str:
    if src == dst:
        return name
    for kind, value in transform_steps(shape, src, dst):
        if kind == "reshape":
            name = reshape(g, name, value)
        elif list(value) != sorted(value):
            name = g.one("Transpose", [name], perm=list(value))
    return name


@exporter("layout_transform")
def _layout_transform(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs, shape = call.attrs, arg_type(call, 0).shape
    return [_layout_steps(g, ins[0], shape, attrs["src_layout"], attrs["dst_layout"])]


@exporter("conv2d_nchwc")
def _conv2d_nchwc(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    """ONNX has no blocked convolution: the plain one between two conversions."""
    return _blocked_conv(g, call, ins, call.attrs)


@exporter("conv2d_winograd")
def _conv2d_winograd(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    """The convolution Winograd's algorithm computes, as conv2d_nchwc's."""
    return _blocked_conv(g, call, ins, {**call.attrs, **WINOGRAD_FIXED})


def _blocked_conv(
    g: ExportGraph, call: Call, ins: list[str], attrs: Mapping[str, Any]
) -> list[str]:
    x = _layout_steps(g, ins[0], arg_type(call, 0).shape, attrs["data_layout"], "NCHW")
    pt, pl, pb, pr = norm_padding(attrs["padding"])
    y = g.one(
        "Conv", [x, ins[1]], strides=pair(attrs["strides"]), pads=[pt, pl, pb, pr],
        dilations=pair(attrs["dilation"]), group=int(attrs["groups"]),
    )  # fmt: skip
    w = arg_type(call, 1).shape
    n, oh, ow = out_type(call).shape[0], *out_type(call).shape[2:4]
    return [_layout_steps(g, y, (n, w[0], oh, ow), "NCHW", attrs["out_layout"])]


@exporter("max_pool2d")
def _max_pool2d(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("MaxPool", ins, **pool_attrs(call))


@exporter("avg_pool2d")
def _avg_pool2d(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    extra = {"count_include_pad": int(attrs["count_include_pad"])}
    return g.node("AveragePool", ins, **pool_attrs(call, with_dilation=False), **extra)


@exporter("global_avg_pool2d")
def _global_avg_pool2d(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("GlobalAveragePool", ins)


@exporter("softmax", "log_softmax")
def _softmax(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = op_name_of(call), call.attrs
    return g.node("Softmax" if op_name == "softmax" else "LogSoftmax", ins, axis=attrs["axis"])


@exporter("batch_norm")
def _batch_norm(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = arg_type(call, 0)
    if attrs["axis"] % x.ndim != 1 or not (attrs["scale"] and attrs["center"]):
        y = g.one("Sub", [ins[0], along(g, ins[3], attrs["axis"], x.ndim)])
        var = g.one("Add", [ins[4], scalar(g, attrs["epsilon"], x.dtype)])
        y = g.one("Div", [y, along(g, g.one("Sqrt", [var]), attrs["axis"], x.ndim)])
        y = affine(g, y, call, ins, attrs["axis"])
    else:
        y = g.one("BatchNormalization", ins, epsilon=float(attrs["epsilon"]))
    return [y, ins[3], ins[4]]


@exporter("layer_norm", "instance_norm", "group_norm")
def _layer_norm(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = op_name_of(call), call.attrs
    x = arg_type(call, 0)
    axis = attrs["axis"] % x.ndim
    if op_name == "layer_norm":
        y = normalise(g, ins[0], [axis], attrs["epsilon"], x.dtype)
    elif op_name == "instance_norm":
        axes = [a for a in range(1, x.ndim) if a != axis]
        y = normalise(g, ins[0], axes, attrs["epsilon"], x.dtype)
    else:
        moved = g.one("Transpose", [ins[0]], perm=move_to_1(axis, x.ndim))
        shape = [x.shape[0], attrs["num_groups"], -1]
        grouped = reshape(g, moved, tuple(shape))
        grouped = normalise(g, grouped, [2], attrs["epsilon"], x.dtype)
        moved_shape = [x.shape[0], x.shape[axis]] + [
            d for k, d in enumerate(x.shape) if k not in (0, axis)
        ]
        back = reshape(g, grouped, tuple(moved_shape))
        y = g.one("Transpose", [back], perm=list(np.argsort(move_to_1(axis, x.ndim))))
    return [affine(g, y, call, ins, axis)]


@exporter("l2_normalize")
def _l2_normalize(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = arg_type(call, 0)
    over = g.const(np.array(axes_of(attrs["axis"], x.ndim), np.int64))
    squares = g.one("ReduceSum", [g.one("Mul", [ins[0], ins[0]]), over], keepdims=1)
    norm = g.one("Sqrt", [g.one("Max", [squares, scalar(g, attrs["eps"], x.dtype)])])
    return g.node("Div", [ins[0], norm])


@exporter("transpose")
def _transpose(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    axes = attrs["axes"]
    ndim = arg_type(call, 0).ndim
    perm = list(reversed(range(ndim))) if axes is None else [int(a) % ndim for a in axes]
    return g.node("Transpose", ins, perm=perm) if perm else g.node("Identity", ins)


@exporter("broadcast_to")
def _broadcast_to(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Expand", [ins[0], g.const(np.array(out_type(call).shape, np.int64))])


@exporter("concatenate")
def _concatenate(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("Concat", ins, axis=int(attrs["axis"]))


@exporter("split")
def _split(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = arg_type(call, 0)
    t = call.checked_type
    assert isinstance(t, TupleType)
    axis = attrs["axis"] % x.ndim
    sizes = [f.shape[axis] for f in t.fields if isinstance(f, TensorType)]
    return g.node("Split", [ins[0], g.const(np.array(sizes, np.int64))], len(sizes), axis=axis)


@exporter("strided_slice")
def _strided_slice(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = arg_type(call, 0)
    begin = list(attrs["begin"])
    axes = list(range(len(begin))) if attrs["axes"] is None else list(attrs["axes"])
    steps = [1] * len(begin) if attrs["strides"] is None else list(attrs["strides"])
    bounds = (begin, list(attrs["end"]), [a % x.ndim for a in axes], steps)
    return g.node("Slice", [ins[0], *(g.const(np.array(v, np.int64)) for v in bounds)])


@exporter("take", "gather_elements")
def _take(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = op_name_of(call), call.attrs
    data, idx = ins
    x = arg_type(call, 0)
    axis = attrs["axis"]
    if axis is None:
        data, axis, size = reshape(g, data, (-1,)), 0, int(np.prod(x.shape))
    else:
        axis, size = axis % x.ndim, x.shape[axis % x.ndim]
    idx = g.one("Cast", [idx], to=g.onnx.TensorProto.INT64)
    gather = "Gather" if op_name == "take" else "GatherElements"
    if attrs["mode"] == "clip":
        limits = [g.const(np.array(v, np.int64)) for v in (0, size - 1)]
        idx = g.one("Clip", [idx, *limits])
    elif attrs["mode"] == "wrap":
        idx = g.one("Mod", [idx, g.const(np.array(size, np.int64))])
    return g.node(gather, [data, idx], axis=axis)


@exporter("pad")
def _pad(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    width = [tuple(p) for p in attrs["pad_width"]]
    pads = [b for b, _ in width] + [a for _, a in width]
    if not any(pads):  # ONNX Runtime refuses Pad on a scalar, even with no padding
        return g.node("Identity", ins)
    mode = attrs["pad_mode"]
    value = scalar(g, attrs["pad_value"], arg_type(call, 0).dtype)
    return g.node("Pad", [ins[0], g.const(np.array(pads, np.int64)), value], mode=mode)


@exporter("argmax")
def _argmax(g: ExportGraph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = arg_type(call, 0)
    data, axis = ins[0], attrs["axis"]
    if axis is None:
        data, axis = reshape(g, data, (-1,)), 0
    result = g.one("ArgMax", [data], axis=int(axis), keepdims=int(attrs["keepdims"]))
    if attrs["axis"] is None and attrs["keepdims"]:
        result = reshape(g, result, (1,) * x.ndim)
    out = out_type(call)
    if out.dtype != "int64":
        result = g.one("Cast", [result], to=elem_type(g.onnx, out.dtype))
    return [result]
