"""Ops that create tensors from a shape or from another tensor's type."""

from __future__ import annotations

import numpy as np

from ..attrs import Attrs
from ..dims import DimLike
from ..registry import AttrSpec, Op, OpPattern, ShapeError, register_op
from ..types import TensorType, Type
from ._common import per_output_element, size_of
from .elementwise import cast_ref

ZERO_FLOPS = per_output_element(0.0)
SHAPE_ATTRS = (AttrSpec("shape", "dims"), AttrSpec("dtype", "dtype", "float32"))


def _from_attrs(args: list[TensorType], attrs: Attrs) -> Type:
    return TensorType(attrs["shape"], attrs["dtype"])


def _like(args: list[TensorType], attrs: Attrs) -> Type:
    return args[0]


def fill_element(value: float, dtype: str) -> np.generic:
    """A float attribute as an element of dtype, by the cast rule (to an integer: truncate
    and saturate, NaN gives 0; to bool: nonzero is True), the same in compiled code."""
    with np.errstate(over="ignore", invalid="ignore"):  # 1e30 as float16 is inf, by design
        array = cast_ref(np.array([value], np.float64), dtype)
    element: np.generic = array[0]
    return element


for _name, _fill in [("zeros", 0), ("ones", 1)]:
    register_op(
        Op(
            name=_name,
            inputs=(),
            infer=_from_attrs,
            pattern=OpPattern.ELEMWISE,
            reference=lambda shape, dtype, v=_fill: np.full(shape, v, dtype=dtype),
            flops=ZERO_FLOPS,
            attrs=SHAPE_ATTRS,
            doc=f"a tensor of {_fill}s",
        )
    )
    register_op(
        Op(
            name=f"{_name}_like",
            inputs=("data",),
            infer=_like,
            pattern=OpPattern.ELEMWISE,
            reference=lambda x, v=_fill: np.full(x.shape, v, dtype=x.dtype),
            flops=ZERO_FLOPS,
            doc=f"{_fill}s of the shape and dtype of data",
        )
    )

register_op(
    Op(
        name="full",
        inputs=(),
        infer=_from_attrs,
        pattern=OpPattern.ELEMWISE,
        reference=lambda fill_value, shape, dtype: np.full(
            shape, fill_element(fill_value, dtype), dtype
        ),
        flops=ZERO_FLOPS,
        attrs=(AttrSpec("fill_value", "float"), *SHAPE_ATTRS),
        doc="a tensor filled with fill_value",
    )
)
register_op(
    Op(
        name="full_like",
        inputs=("data",),
        infer=_like,
        pattern=OpPattern.ELEMWISE,
        reference=lambda x, fill_value: np.full(
            x.shape, fill_element(fill_value, x.dtype), x.dtype
        ),
        flops=ZERO_FLOPS,
        attrs=(AttrSpec("fill_value", "float"),),
        doc="fill_value in the shape and dtype of data",
    )
)


# ---------------------------------------------------------------- sizes as values
def _arange_count(start: DimLike, stop: DimLike, step: int) -> DimLike:
    """How many values start, start + step, ... stay before stop. Symbolic bounds are
    taken in order (stop >= start for a positive step): what a Range over positions
    computed from sizes (0 .. seq, past .. past + 1) always is."""
    if step == 0:
        raise ShapeError("arange step must not be 0")
    if isinstance(start, int) and isinstance(stop, int):
        return max(-(-(stop - start) // step), 0)
    span = stop - start if step > 0 else start - stop
    return (span + abs(step) - 1) // abs(step)


def _arange_infer(args: list[TensorType], attrs: Attrs) -> Type:
    count = _arange_count(attrs["start"], attrs["stop"], attrs["step"])
    return TensorType((count,), attrs["dtype"])  # type: ignore[arg-type]  # Dims allowed


register_op(
    Op(
        name="arange",
        inputs=(),
        infer=_arange_infer,
        pattern=OpPattern.ELEMWISE,
        reference=lambda start, stop, step, dtype: np.arange(start, stop, step, dtype=dtype),
        flops=ZERO_FLOPS,
        attrs=(
            AttrSpec("start", "dim"),
            AttrSpec("stop", "dim"),
            AttrSpec("step", "int", 1),
            AttrSpec("dtype", "dtype", "int64"),
        ),
        doc="start, start + step, ... before stop; the bounds may be sizes (Dims)",
    )
)


def _dim_values_infer(args: list[TensorType], attrs: Attrs) -> Type:
    shape, values = attrs["shape"], attrs["values"]
    if size_of(shape) != len(values):
        raise ShapeError(f"{len(values)} values do not fill the shape {shape}")
    return TensorType(shape, attrs["dtype"])


register_op(
    Op(
        name="dim_values",
        inputs=(),
        infer=_dim_values_infer,
        pattern=OpPattern.ELEMWISE,
        reference=lambda values, shape, dtype: np.asarray(values, dtype=dtype).reshape(shape),
        flops=ZERO_FLOPS,
        attrs=(
            AttrSpec("values", "dims"),
            AttrSpec("shape", "ints", ()),
            AttrSpec("dtype", "dtype", "int64"),
        ),
        doc="a small tensor of sizes known when the program runs (values of ONNX Shape)",
    )
)
