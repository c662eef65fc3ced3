"""Cumulative ops and bit shifts (ONNX CumSum, CumProd, BitShift).

They have numpy references and type relations but no loop compute definition: a fused
group holding one runs through the host fallback (codegen/lower/), so they are opaque
and stay in groups of their own.
"""

from __future__ import annotations

import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, ShapeError, register_op
from ..types import TensorType, Type
from ._common import INTEGER, NUMERIC, binary, per_output_element, require_dtype


def _cumulative_infer(args: list[TensorType], attrs: Attrs) -> Type:
    (x,) = args
    require_dtype(x, NUMERIC, "data")
    if x.ndim == 0 or not -x.ndim <= attrs["axis"] < x.ndim:
        raise ShapeError(f"axis {attrs['axis']} is out of range for a tensor of rank {x.ndim}")
    return x


def _cumulative(ufunc: np.ufunc, identity: int):
    def reference(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
        if reverse:
            x = np.flip(x, axis)
        out = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
        if exclusive:  # shift by one: the first element is the identity
            out = np.roll(out, 1, axis=axis)
            index = [slice(None)] * x.ndim
            index[axis] = slice(0, 1)
            out[tuple(index)] = identity
        return np.flip(out, axis) if reverse else out

    return reference


for _name, _ufunc, _identity in (("cumsum", np.add, 0), ("cumprod", np.multiply, 1)):
    register_op(
        Op(
            name=_name,
            inputs=("data",),
            infer=_cumulative_infer,
            reference=_cumulative(_ufunc, _identity),
            pattern=OpPattern.OPAQUE,
            flops=per_output_element(1.0),
            attrs=(
                AttrSpec("axis", "int"),
                AttrSpec("exclusive", "bool", False),
                AttrSpec("reverse", "bool", False),
            ),
            doc=f"{_name} along axis (exclusive: start from the identity; reverse: from the end)",
        )
    )


def _shift(np_fn):
    def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        bits = np.dtype(x.dtype).itemsize * 8
        wide = np.broadcast_to(y, np.broadcast_shapes(x.shape, y.shape))
        out = np_fn(x, np.minimum(wide, bits - 1).astype(x.dtype)).astype(x.dtype)
        if np_fn is np.right_shift and np.dtype(x.dtype).kind == "i":
            return out  # arithmetic: a shift past the width leaves the sign (0 or -1)
        return np.where(wide >= bits, np.zeros((), x.dtype), out)  # shifted out entirely

    return reference


for _name, _fn in (("left_shift", np.left_shift), ("right_shift", np.right_shift)):
    register_op(
        Op(
            name=_name,
            inputs=("lhs", "rhs"),
            infer=binary(INTEGER),
            reference=_shift(_fn),
            pattern=OpPattern.OPAQUE,
            flops=per_output_element(1.0),
            doc=f"{_name.replace('_', ' ')} of integers (by the width or more: 0, or the "
            "sign for a right shift of signed integers)",
        )
    )
