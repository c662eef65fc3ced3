"""Shared pieces of op definitions: shape checks, type relations and FLOP estimates."""

from __future__ import annotations

from collections.abc import Sequence

from ..attrs import Attrs
from ..registry import Op, OpPattern, ShapeError, register_op
from ..types import TensorType, Type, tensor_types

INTEGER = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = (*INTEGER, "float16", "float32", "float64")


def require_dtype(t: TensorType, allowed: Sequence[str], what: str = "input") -> None:
    if t.dtype not in allowed:
        raise ShapeError(
            f"{what} dtype {t.dtype} not supported; expects one of {', '.join(allowed)}"
        )


def same_dtype(types: Sequence[TensorType]) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise ShapeError(f"dtypes differ: {', '.join(t.dtype for t in types)}")
    return types[0].dtype


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting with an error naming the shapes."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(f"cannot broadcast {' with '.join(str(s) for s in shapes)}")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def norm_axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what} {axis} out of range for rank {ndim}")
    return axis % ndim


def norm_axes(axes: tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    """Normalise reduction axes; None means all. Duplicates are an error."""
    if axes is None:
        return tuple(range(ndim))
    out = tuple(norm_axis(a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axes}")
    return out


def size_of(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


# ---------------------------------------------------------------- type relations
def unary(allowed: Sequence[str] = NUMERIC, out_dtype: str | None = None):
    def infer(args: list[TensorType], attrs: Attrs) -> Type:
        require_dtype(args[0], allowed)
        return TensorType(args[0].shape, out_dtype or args[0].dtype)

    return infer


def binary(allowed: Sequence[str] = NUMERIC, out_dtype: str | None = None):
    def infer(args: list[TensorType], attrs: Attrs) -> Type:
        dtype = same_dtype(args)
        require_dtype(args[0], allowed)
        return TensorType(broadcast_shapes(args[0].shape, args[1].shape), out_dtype or dtype)

    return infer


# ---------------------------------------------------------------- FLOP estimates
def per_output_element(k: float):
    """k FLOPs per output element (k=0 for data movement)."""

    def flops(args: list[TensorType], out: Type, attrs: Attrs) -> float:
        return k * sum(t.size for t in tensor_types(out))

    return flops


def per_input_element(k: float):
    def flops(args: list[TensorType], out: Type, attrs: Attrs) -> float:
        return k * args[0].size

    return flops


# A transcendental function costs about this many FLOPs (a polynomial plus range reduction).
TRANSCENDENTAL = 10.0


def register_anchor(
    name,
    inputs,
    infer,
    ref,
    flops,
    attrs=(),
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    doc="",
    variadic=False,
):
    """Register an op from positional parts; by default one whose elementwise consumers
    fuse after it (nn.py, norm.py; shape.py passes its own pattern and cost)."""
    register_op(
        Op(
            name=name,
            inputs=inputs,
            infer=infer,
            reference=ref,
            pattern=pattern,
            flops=flops,
            attrs=attrs,
            doc=doc,
            variadic=variadic,
        )
    )
