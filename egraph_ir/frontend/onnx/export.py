"""Export IR to ONNX: `to_onnx(mod)` writes main (dataflow only) as an ONNX model.

Shapes are static here, so every shape-only op (reshape, flatten, squeeze, expand_dims)
becomes a Reshape to its known result shape, and creation ops become initialisers. Ops
whose ONNX form needs a newer opset than the target (GELU, group norm) are written as their
defining formulas. Each converter gets the typed call and returns the output names; the
walk over the dataflow is iterative, so deep graphs export without recursion.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import FrontendError
from ...expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from ...infer import infer_type
from ...module import IRModule
from ...op.nn import norm_padding
from ...registry import Op
from ...types import TensorType, TupleType, tensor_types
from ...visitor import post_order

OPSET = 17


class _Graph:
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


Converter = Callable[[_Graph, Call, list[str]], list[str]]

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


def _out(call: Call) -> TensorType:
    t = call.checked_type
    assert isinstance(t, TensorType)
    return t


def _arg(call: Call, k: int) -> TensorType:
    t = call.args[k].checked_type
    assert isinstance(t, TensorType)
    return t


def _scalar(g: _Graph, value: float, dtype: str) -> str:
    """A scalar constant; for integers, a bound beyond the dtype's range is its limit
    (clip to -6 on uint8 is clip to 0)."""
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        value = min(max(value, info.min), info.max)
    return g.const(np.array(value, dtype=dtype))


def _reshape(g: _Graph, x: str, shape: tuple[int, ...]) -> str:
    return g.one("Reshape", [x, g.const(np.array(shape, dtype=np.int64), hint="shape")])


def _along(g: _Graph, vec: str, axis: int, ndim: int) -> str:
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return _reshape(g, vec, tuple(shape))


def _affine(g: _Graph, y: str, call: Call, ins: list[str], axis: int) -> str:
    ndim = _arg(call, 0).ndim  # the data's rank (batch_norm's result is a tuple)
    if call.attrs["scale"]:
        y = g.one("Mul", [y, _along(g, ins[1], axis, ndim)])
    if call.attrs["center"]:
        y = g.one("Add", [y, _along(g, ins[2], axis, ndim)])
    return y


def _normalise(g: _Graph, x: str, axes: list[int], eps: float, dtype: str) -> str:
    """(x - mean) / sqrt(var + eps) over axes (a reference formula, for norms ONNX lacks)."""
    mean = g.one("ReduceMean", [x], axes=axes, keepdims=1)
    centred = g.one("Sub", [x, mean])
    var = g.one("ReduceMean", [g.one("Mul", [centred, centred])], axes=axes, keepdims=1)
    std = g.one("Sqrt", [g.one("Add", [var, _scalar(g, eps, dtype)])])
    return g.one("Div", [centred, std])


def _pool_attrs(call: Call, with_dilation: bool = True) -> dict[str, Any]:
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


def _pair(value: Any) -> list[int]:
    return [value, value] if isinstance(value, int) else list(value)


def _convert(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    """One op call as ONNX nodes; the names of its outputs."""
    name = _name(call)
    if name in UNARY:
        return g.node(UNARY[name], ins)
    if name in BINARY:
        return g.node(BINARY[name], ins)
    export = EXPORTERS.get(name)
    if export is None:
        raise FrontendError(f"no ONNX form for op '{name}'")
    return export(g, call, ins)


Exporter = Callable[["_Graph", Call, list[str]], list[str]]
EXPORTERS: dict[str, Exporter] = {}


def exporter(*names: str) -> Callable[[Exporter], Exporter]:
    """Register the ONNX form of these ops: a function from a typed call and the names of
    its inputs to the names of its outputs, adding nodes to the graph."""

    def register(fn: Exporter) -> Exporter:
        for n in names:
            EXPORTERS[n] = fn
        return fn

    return register


def _name(call: Call) -> str:
    assert isinstance(call.op, Op)
    return call.op.name


@exporter(*RESHAPES)
def _reshapes(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return [_reshape(g, ins[0], _out(call).shape)]


@exporter(*CREATION)
def _creation(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = _name(call), call.attrs
    out = _out(call)
    assert out is not None
    value = attrs.get("fill_value", 1 if "ones" in op_name else 0)
    return [g.const(np.full(out.shape, value, dtype=out.dtype))]


@exporter(*REDUCE)
def _reduce(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = _name(call), call.attrs
    axes = axes_of(attrs["axis"], _arg(call, 0).ndim)
    keep = int(attrs["keepdims"])
    if not axes:  # over no axis (a scalar, or axis=[]): every element is its own result
        return g.node("Identity", ins)
    if op_name == "sum":
        return g.node("ReduceSum", [ins[0], g.const(np.array(axes, np.int64))], keepdims=keep)
    return g.node(REDUCE[op_name], ins, axes=axes, keepdims=keep)


@exporter("fmod")
def _fmod(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Mod", ins, fmod=1)


@exporter("mod")
def _mod(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    if _out(call).dtype.startswith("float"):  # ONNX's Mod needs fmod=1 on floats
        floor = g.one("Floor", [g.one("Div", ins)])
        return g.node("Sub", [ins[0], g.one("Mul", [floor, ins[1]])])
    return g.node("Mod", ins, fmod=0)


@exporter("dropout")
def _dropout(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    x = _arg(call, 0)
    return [g.one("Identity", ins), g.const(np.ones(x.shape, x.dtype))]


@exporter("not_equal")
def _not_equal(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Not", [g.one("Equal", ins)])


@exporter("rsqrt")
def _rsqrt(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Reciprocal", [g.one("Sqrt", ins)])


@exporter("where")
def _where(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Where", ins)


@exporter("leaky_relu")
def _leaky_relu(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("LeakyRelu", ins, alpha=float(attrs["alpha"]))


@exporter("gelu")
def _gelu(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    v, dtype = ins[0], _arg(call, 0).dtype
    if attrs["approximate"] == "tanh":
        cube = g.one("Mul", [v, g.one("Mul", [v, v])])
        inner = g.one("Add", [v, g.one("Mul", [cube, _scalar(g, 0.044715, dtype)])])
        scaled = g.one("Mul", [inner, _scalar(g, math.sqrt(2 / math.pi), dtype)])
        gate = g.one("Add", [g.one("Tanh", [scaled]), _scalar(g, 1.0, dtype)])
    else:
        erf = g.one("Erf", [g.one("Div", [v, _scalar(g, math.sqrt(2.0), dtype)])])
        gate = g.one("Add", [erf, _scalar(g, 1.0, dtype)])
    return g.node("Mul", [g.one("Mul", [v, gate]), _scalar(g, 0.5, dtype)])


@exporter("clip")
def _clip(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    dtype = _arg(call, 0).dtype
    lo, hi = _scalar(g, attrs["a_min"], dtype), _scalar(g, attrs["a_max"], dtype)
    return g.node("Clip", [ins[0], lo, hi])


@exporter("cast")
def _cast(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("Cast", ins, to=_elem(g.onnx, attrs["dtype"]))


@exporter("dense")
def _dense(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    if _arg(call, 0).ndim == 2:
        return g.node("Gemm", ins, transB=1)
    return g.node("MatMul", [ins[0], g.one("Transpose", [ins[1]], perm=[1, 0])])


@exporter("matmul")
def _matmul(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("MatMul", ins)


@exporter("batch_matmul")
def _batch_matmul(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    a, b = ins
    for k, flag in ((0, "transpose_a"), (1, "transpose_b")):
        if attrs[flag]:
            nd = _arg(call, k).ndim
            perm = [*range(nd - 2), nd - 1, nd - 2]
            if k == 0:
                a = g.one("Transpose", [a], perm=perm)
            else:
                b = g.one("Transpose", [b], perm=perm)
    return g.node("MatMul", [a, b])


@exporter("bias_add")
def _bias_add(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("Add", [ins[0], _along(g, ins[1], attrs["axis"], _arg(call, 0).ndim)])


@exporter("conv2d")
def _conv2d(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    pt, pl, pb, pr = norm_padding(attrs["padding"])
    return g.node(
        "Conv", ins, strides=_pair(attrs["strides"]), pads=[pt, pl, pb, pr],
        dilations=_pair(attrs["dilation"]), group=int(attrs["groups"]),
    )  # fmt: skip


@exporter("max_pool2d")
def _max_pool2d(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("MaxPool", ins, **_pool_attrs(call))


@exporter("avg_pool2d")
def _avg_pool2d(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    extra = {"count_include_pad": int(attrs["count_include_pad"])}
    return g.node("AveragePool", ins, **_pool_attrs(call, with_dilation=False), **extra)


@exporter("global_avg_pool2d")
def _global_avg_pool2d(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("GlobalAveragePool", ins)


@exporter("softmax", "log_softmax")
def _softmax(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = _name(call), call.attrs
    return g.node("Softmax" if op_name == "softmax" else "LogSoftmax", ins, axis=attrs["axis"])


@exporter("batch_norm")
def _batch_norm(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = _arg(call, 0)
    if attrs["axis"] % x.ndim != 1 or not (attrs["scale"] and attrs["center"]):
        y = g.one("Sub", [ins[0], _along(g, ins[3], attrs["axis"], x.ndim)])
        var = g.one("Add", [ins[4], _scalar(g, attrs["epsilon"], x.dtype)])
        y = g.one("Div", [y, _along(g, g.one("Sqrt", [var]), attrs["axis"], x.ndim)])
        y = _affine(g, y, call, ins, attrs["axis"])
    else:
        y = g.one("BatchNormalization", ins, epsilon=float(attrs["epsilon"]))
    return [y, ins[3], ins[4]]


@exporter("layer_norm", "instance_norm", "group_norm")
def _layer_norm(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = _name(call), call.attrs
    x = _arg(call, 0)
    axis = attrs["axis"] % x.ndim
    if op_name == "layer_norm":
        y = _normalise(g, ins[0], [axis], attrs["epsilon"], x.dtype)
    elif op_name == "instance_norm":
        axes = [a for a in range(1, x.ndim) if a != axis]
        y = _normalise(g, ins[0], axes, attrs["epsilon"], x.dtype)
    else:
        moved = g.one("Transpose", [ins[0]], perm=_move_to_1(axis, x.ndim))
        shape = [x.shape[0], attrs["num_groups"], -1]
        grouped = _reshape(g, moved, tuple(shape))
        grouped = _normalise(g, grouped, [2], attrs["epsilon"], x.dtype)
        moved_shape = [x.shape[0], x.shape[axis]] + [
            d for k, d in enumerate(x.shape) if k not in (0, axis)
        ]
        back = _reshape(g, grouped, tuple(moved_shape))
        y = g.one("Transpose", [back], perm=list(np.argsort(_move_to_1(axis, x.ndim))))
    return [_affine(g, y, call, ins, axis)]


@exporter("l2_normalize")
def _l2_normalize(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = _arg(call, 0)
    over = g.const(np.array(axes_of(attrs["axis"], x.ndim), np.int64))
    squares = g.one("ReduceSum", [g.one("Mul", [ins[0], ins[0]]), over], keepdims=1)
    norm = g.one("Sqrt", [g.one("Max", [squares, _scalar(g, attrs["eps"], x.dtype)])])
    return g.node("Div", [ins[0], norm])


@exporter("transpose")
def _transpose(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    axes = attrs["axes"]
    ndim = _arg(call, 0).ndim
    perm = list(reversed(range(ndim))) if axes is None else [int(a) % ndim for a in axes]
    return g.node("Transpose", ins, perm=perm) if perm else g.node("Identity", ins)


@exporter("broadcast_to")
def _broadcast_to(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    return g.node("Expand", [ins[0], g.const(np.array(_out(call).shape, np.int64))])


@exporter("concatenate")
def _concatenate(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    return g.node("Concat", ins, axis=int(attrs["axis"]))


@exporter("split")
def _split(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = _arg(call, 0)
    t = call.checked_type
    assert isinstance(t, TupleType)
    axis = attrs["axis"] % x.ndim
    sizes = [f.shape[axis] for f in t.fields if isinstance(f, TensorType)]
    return g.node("Split", [ins[0], g.const(np.array(sizes, np.int64))], len(sizes), axis=axis)


@exporter("strided_slice")
def _strided_slice(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = _arg(call, 0)
    begin = list(attrs["begin"])
    axes = list(range(len(begin))) if attrs["axes"] is None else list(attrs["axes"])
    steps = [1] * len(begin) if attrs["strides"] is None else list(attrs["strides"])
    bounds = (begin, list(attrs["end"]), [a % x.ndim for a in axes], steps)
    return g.node("Slice", [ins[0], *(g.const(np.array(v, np.int64)) for v in bounds)])


@exporter("take", "gather_elements")
def _take(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    op_name, attrs = _name(call), call.attrs
    data, idx = ins
    x = _arg(call, 0)
    axis = attrs["axis"]
    if axis is None:
        data, axis, size = _reshape(g, data, (-1,)), 0, int(np.prod(x.shape))
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
def _pad(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    width = [tuple(p) for p in attrs["pad_width"]]
    pads = [b for b, _ in width] + [a for _, a in width]
    if not any(pads):  # ONNX Runtime refuses Pad on a scalar, even with no padding
        return g.node("Identity", ins)
    mode = attrs["pad_mode"]
    value = _scalar(g, attrs["pad_value"], _arg(call, 0).dtype)
    return g.node("Pad", [ins[0], g.const(np.array(pads, np.int64)), value], mode=mode)


@exporter("argmax")
def _argmax(g: _Graph, call: Call, ins: list[str]) -> list[str]:
    attrs = call.attrs
    x = _arg(call, 0)
    data, axis = ins[0], attrs["axis"]
    if axis is None:
        data, axis = _reshape(g, data, (-1,)), 0
    result = g.one("ArgMax", [data], axis=int(axis), keepdims=int(attrs["keepdims"]))
    if attrs["axis"] is None and attrs["keepdims"]:
        result = _reshape(g, result, (1,) * x.ndim)
    out = _out(call)
    if out.dtype != "int64":
        result = g.one("Cast", [result], to=_elem(g.onnx, out.dtype))
    return [result]


def _move_to_1(axis: int, ndim: int) -> list[int]:
    return [0, axis] + [k for k in range(1, ndim) if k != axis]


def to_onnx(mod: IRModule | Function, opset: int = OPSET, name: str = "egc") -> Any:
    """main as an ONNX ModelProto (checked by onnx.checker). Inputs keep their names;
    outputs take main's `output_names` (set by ONNX import) or output0, output1, ..."""
    import onnx

    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    mod = infer_type(mod)
    fn = mod["main"]
    g = _Graph(onnx)
    values: dict[Expr, list[str]] = {}
    inputs = []
    for p in fn.params:
        t = p.checked_type
        if not isinstance(t, TensorType):
            raise FrontendError(f"to_onnx: input %{p.name_hint} is {t}; only tensors export")
        values[p] = [p.name_hint]
        info = onnx.helper.make_tensor_value_info(p.name_hint, _elem(onnx, t.dtype), t.shape)
        inputs.append(info)
    missing: dict[str, int] = {}
    for e in post_order(fn.body, into_functions=False):
        if e in values:
            continue
        if isinstance(e, Constant):
            values[e] = [g.const(e.data)]
        elif isinstance(e, Call) and isinstance(e.op, Op):
            args = [values[a] for a in e.args]
            if any(len(a) != 1 for a in args):
                raise FrontendError(f"to_onnx: {e.op.name} takes a tuple argument")
            try:
                values[e] = _convert(g, e, [a[0] for a in args])
            except FrontendError:
                missing[e.op.name] = missing.get(e.op.name, 0) + 1
                values[e] = ["?"]
        elif isinstance(e, Tuple):
            values[e] = [n for f in e.fields for n in values[f]]
        elif isinstance(e, TupleGetItem):
            values[e] = [values[e.tuple_value][e.index]]
        elif isinstance(e, Var):
            raise FrontendError(f"to_onnx: free variable %{e.name_hint}")
        else:
            raise FrontendError(
                f"to_onnx: {type(e).__name__} nodes do not export; only dataflow (calls of "
                "ops, tuples) does — run the function-level passes first, not FuseOps"
            )
    if missing:
        ops = ", ".join(f"{k} (x{v})" for k, v in sorted(missing.items()))
        raise FrontendError(f"to_onnx: no ONNX form for: {ops}")
    results = values[fn.body]
    types = tensor_types(fn.body.checked_type)
    names = [str(n) for n in fn.attrs.get("output_names", ())]
    if len(names) != len(results):
        names = [f"output{i}" for i in range(len(results))]
    outputs = []
    for result, out_name, ot in zip(results, names, types, strict=True):
        g.nodes.append(onnx.helper.make_node("Identity", [result], [out_name]))
        info = onnx.helper.make_tensor_value_info(out_name, _elem(onnx, ot.dtype), ot.shape)
        outputs.append(info)
    graph = onnx.helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)  # what onnxruntime 1.18+ reads
    onnx.checker.check_model(model)
    return model


def _elem(onnx: Any, dtype: str) -> int:
    return int(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
