"""Shape arithmetic over symbolic sizes, done while importing.

Exporters compute shapes at run time: Shape, then Gather, Unsqueeze, Concat, arithmetic,
Equal and Where on the result, then Reshape, Expand, ConstantOfShape, Slice or Range with
it. Where a tensor's shape holds size variables (`batch`, `seq`), those values are not
numbers, but they are known *expressions* of the sizes. `SizeValues` holds such a small
tensor (a numpy object array of ints and Dims), and `evaluate` runs the shape ops on it, so
the chain folds into size expressions: `Reshape(x, Concat(Shape(x)[0], -1, 2, 64))`
becomes `reshape(x, newshape=(batch, seq, 2, 64))`. A value a real computation reads (a
position index `0 .. past`) becomes the IR op `dim_values`, which the program evaluates
when it runs. Equal decides only what holds for every size (`seq == -1` never does);
anything else is an error naming the comparison (dims.equal_sizes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import op
from ...dims import Dim, equal_sizes
from ...expr import Constant, Expr
from ...infer import infer_new_nodes
from ...types import TensorType

MAX_ELEMENTS = 64  # a constant this small may join shape arithmetic (larger ones are data)


@dataclass(frozen=True, eq=False)
class SizeValues:
    """A small tensor whose elements are ints and Dims, of ONNX dtype `dtype`."""

    data: np.ndarray  # dtype object
    dtype: str

    def expr(self) -> Expr:
        """The IR for it: a constant once every element is a number, else dim_values."""
        if not any(isinstance(v, Dim) for v in self.data.flat):
            return Constant(self.data.astype(self.dtype))
        return op.dim_values(values=tuple(self.data.flat), shape=self.data.shape, dtype=self.dtype)


def of(data: np.ndarray, dtype: str) -> SizeValues | Constant:
    """Values as SizeValues while a Dim is among them, else as a plain constant."""
    data = np.asarray(data, dtype=object)
    if any(isinstance(v, Dim) for v in data.flat):
        return SizeValues(data, dtype)
    return Constant(data.astype(dtype))


def shape_values(t: TensorType, start: int = 0, end: int | None = None) -> SizeValues | Constant:
    """ONNX Shape of a tensor of type t (the dims from start to end)."""
    dims = t.shape[start:end]
    out = np.empty(len(dims), dtype=object)
    out[:] = list(dims)
    return of(out, "int64")


def _operand(value: Any) -> np.ndarray | None:
    """A value as an object array for shape arithmetic, or None when it is data."""
    if isinstance(value, SizeValues):
        return value.data
    small = isinstance(value, Constant) and value.data.size <= MAX_ELEMENTS
    if small and value.data.dtype.kind in "iub":
        return value.data.astype(object)
    return None


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, Constant) and value.data.dtype.kind in "iu":
        return [int(v) for v in value.data.reshape(-1)]
    return None


def _where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(cond.astype(bool), a, b)


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    decide = np.frompyfunc(equal_sizes, 2, 1)
    return np.asarray(decide(a, b), dtype=object)


ARITHMETIC: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.floor_divide,  # sizes are non-negative: C division is floor division
    "Equal": _equal,
    "Where": _where,
    "Max": np.maximum,
    "Min": np.minimum,
}


def evaluate(
    op_type: str, inputs: list[Any], attrs: dict[str, Any]
) -> SizeValues | Constant | None:
    """The node's value by shape arithmetic, or None when it is not shape arithmetic
    (some input is data, or no input holds a size)."""
    if not any(isinstance(v, SizeValues) for v in inputs):
        return None
    operands = [_operand(v) for v in inputs]
    first, dtype = operands[0], _dtype(inputs[0])
    if op_type in ARITHMETIC:
        if any(o is None for o in operands):
            return None
        result = ARITHMETIC[op_type](*operands)
        if op_type == "Equal":
            dtype = "bool"
        elif op_type == "Where":
            dtype = _dtype(inputs[1])
        return of(result, dtype)
    if op_type == "Concat":
        parts = [o for o in operands if o is not None]
        if len(parts) < len(operands):
            return None
        return of(np.concatenate(parts, axis=int(attrs["axis"])), dtype)
    if first is None or not isinstance(inputs[0], SizeValues):
        return None  # a size used as indices into data (Gather(table, past)) is data
    if op_type in ("Identity", "Neg"):
        return of(-first if op_type == "Neg" else first, dtype)
    if op_type == "Cast":
        return of(first, _onnx_dtype(attrs["to"]))
    return _move(op_type, first, dtype, inputs[1:], attrs)


def _move(op_type: str, data: np.ndarray, dtype: str, rest: list[Any], attrs: dict[str, Any]):
    """Ops that move size values without computing: gather, (un)squeeze, slice,
    reshape. Their index inputs must be plain numbers."""
    axes = _ints(rest[0]) if rest else None
    if op_type == "Gather" and axes is not None:
        index = rest[0].data.astype(np.int64)
        return of(np.take(data, index, axis=int(attrs.get("axis", 0))), dtype)
    if op_type == "Unsqueeze":
        axes = axes if axes is not None else list(attrs.get("axes", []))
        rank = data.ndim + len(axes)
        return of(np.expand_dims(data, tuple(sorted(a % rank for a in axes))), dtype)
    if op_type == "Squeeze":
        axes = axes if axes is not None else attrs.get("axes")
        squeezed = np.squeeze(data, tuple(a % data.ndim for a in axes) if axes else None)
        return of(squeezed, dtype)
    if op_type == "Slice":
        return _slice(data, dtype, rest)
    if op_type == "Reshape" and axes is not None:
        return of(data.reshape([d if d != 0 else data.shape[i] for i, d in enumerate(axes)]), dtype)
    return None


def _slice(data: np.ndarray, dtype: str, rest: list[Any]) -> SizeValues | Constant | None:
    starts, ends = _ints(rest[0]), _ints(rest[1])
    axes = _ints(rest[2]) if len(rest) > 2 and rest[2] is not None else None
    steps = _ints(rest[3]) if len(rest) > 3 and rest[3] is not None else None
    if starts is None or ends is None:
        return None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, k in zip(starts, ends, axes, steps, strict=True):
        index[a % data.ndim] = slice(s, e, k)
    return of(data[tuple(index)], dtype)


def _dtype(value: Any) -> str:
    if isinstance(value, SizeValues):
        return value.dtype
    return str(value.data.dtype) if isinstance(value, Constant) else "int64"


def _onnx_dtype(code: int) -> str:
    import onnx

    return str(onnx.helper.tensor_dtype_to_np_dtype(code))


def size_node(op_type: str, value: Any, attrs: dict[str, Any]) -> SizeValues | Constant | None:
    """Shape or Size of a tensor whose shape holds sizes; None for any other node."""
    if op_type not in ("Shape", "Size") or not isinstance(value, Expr):
        return None
    t = infer_new_nodes(value).checked_type
    if not isinstance(t, TensorType) or t.is_static:
        return None
    if op_type == "Size":
        return of(np.asarray(t.size, dtype=object), "int64")
    return shape_values(t, int(attrs.get("start", 0)), attrs.get("end"))


def dims_of(values: Any) -> list[int | Dim]:
    """A shape input's entries (a constant's numbers, or sizes) as ints and Dims."""
    return [v if isinstance(v, Dim) else int(v) for v in np.asarray(values).reshape(-1)]
