"""Types of IR values: tensors (a dimension is an int or a symbolic size, egraph_ir/dims.py),
tuples and functions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes  # noqa: F401  (registers bfloat16, float8, float4 and int4 with numpy)
import numpy as np

from .dims import as_dim, is_static, typical
from .errors import TypeInferenceError

# storage formats numpy knows through ml_dtypes: the interpreter computes with them (numpy
# widens per operation); native kernels do not, so groups using them run on the host
NARROW_FLOATS = (
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn",
)  # fmt: skip
NARROW_INTS = ("int4", "uint4", "int2", "uint2")
DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", *NARROW_FLOATS, *NARROW_INTS,
)  # fmt: skip
FLOAT_DTYPES = ("float16", "float32", "float64", *NARROW_FLOATS)
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              *NARROW_INTS)  # fmt: skip


def check_dtype(dtype: str) -> str:
    """Return dtype if it is one the compiler supports, else raise naming the known ones."""
    if dtype not in DTYPES:
        raise TypeInferenceError(f"unknown dtype '{dtype}'; known: {', '.join(DTYPES)}")
    return dtype


class Type:
    """Base class of IR types (value objects, compared by value)."""

    __slots__ = ()


def priced(t: Type) -> Any:
    """t with each symbolic size at its typical value (what cost models read)."""
    if isinstance(t, TensorType) and not t.is_static:
        return TensorType(tuple(typical(d) for d in t.shape), t.dtype)
    if isinstance(t, TupleType):
        return TupleType(tuple(priced(f) for f in t.fields))
    return t


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor of a shape and a dtype; shape () is a scalar. A dimension is an int or a
    symbolic size (a Dim; a name given as a str becomes one): `(batch, seq, 768)`."""

    shape: tuple[int, ...]  # an entry may be a Dim where the type is symbolic (is_static)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        shape = tuple(as_dim(d) for d in self.shape)
        if any(isinstance(d, int) and d < 0 for d in shape):
            raise TypeInferenceError(f"negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        check_dtype(self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """Every dimension a number (no size variable)."""
        return is_static(self.shape)

    @property
    def size(self) -> int:
        """The element count (a Dim where the shape is symbolic)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype  # scalars print as their dtype, as in Relay
        dims = ", ".join(str(d) for d in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """The type of a tuple value; fields are types."""

    fields: tuple[Type, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))

    def __str__(self) -> str:
        inner = ", ".join(str(f) for f in self.fields)
        return f"({inner},)" if len(self.fields) == 1 else f"({inner})"


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    """The type of a function value."""

    params: tuple[Type, ...]
    ret: Type

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))

    def __str__(self) -> str:
        return f"fn ({', '.join(str(p) for p in self.params)}) -> {self.ret}"


def tensor_types(t: Type) -> list[TensorType]:
    """Flatten a (nested) tuple type into its tensor leaves."""
    out: list[TensorType] = []
    stack = [t]
    while stack:
        cur = stack.pop()
        if isinstance(cur, TensorType):
            out.append(cur)
        elif isinstance(cur, TupleType):
            stack.extend(reversed(cur.fields))
    return out
