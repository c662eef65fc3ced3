"""Operators: `op.<name>(...)` builds a call of any registered op.

Tensors come first (positional), then attributes (keyword, or positional in declaration
order): `op.conv2d(x, w, padding=(1, 1))`, `op.transpose(x, (1, 0))`,
`op.concatenate([a, b], axis=1)`. Python numbers and numpy arrays given as tensors become
constants (a Python number takes the dtype of the other tensor arguments when known).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ..attrs import Attrs
from ..expr import Call, Constant, Expr, Var, const
from ..registry import REQUIRED, Op, OpPattern, get_op, list_ops, register_op
from ..support import register_shipped_targets, register_support, supports, unregister_support
from . import (  # noqa: F401
    annotation,
    creation,
    device,
    elementwise,
    layout,
    mlas,
    nn,
    norm,
    qnn,
    reduce,
    scan,
    select,
    shape,
)

register_shipped_targets()

__all__ = [
    "Op",
    "OpPattern",
    "call",
    "get",
    "list_ops",
    "register_op",
    "rounded_product",
    "register_support",
    "supports",
    "unregister_support",
]

get = get_op


def _known_dtype(e: Expr) -> str | None:
    if isinstance(e, Constant):
        return str(e.data.dtype)
    if isinstance(e, Var) and e.type_annotation is not None:
        return getattr(e.type_annotation, "dtype", None)
    ty = getattr(e, "_checked_type", None)
    return getattr(ty, "dtype", None)


def _as_exprs(values: list[Any]) -> list[Expr]:
    """Wrap numbers and arrays as constants, matching the dtype of the other arguments."""
    hint = next((d for v in values if isinstance(v, Expr) and (d := _known_dtype(v))), None)
    out = []
    for v in values:
        if isinstance(v, Expr):
            out.append(v)
        elif isinstance(v, np.ndarray):
            out.append(Constant(v))
        elif isinstance(v, bool | int | float):
            out.append(const(v, hint) if hint else const(v))
        else:
            raise TypeError(f"expected an Expr, a number or a numpy array, got {type(v).__name__}")
    return out


def call(name: str, *args: Any, **attrs: Any) -> Call:
    """Build a call of op `name` (the generic form of `op.<name>`)."""
    o = get_op(name)
    if o.variadic:
        if args and isinstance(args[0], list | tuple):
            tensors, extra = list(args[0]), args[1:]
        else:
            tensors, extra = list(args), ()
    else:
        n = len(o.inputs)
        tensors, extra = list(args[:n]), args[n:]
    if len(extra) > len(o.attrs):
        raise TypeError(f"{name}: too many positional arguments ({len(args)})")
    for spec, value in zip(o.attrs, extra, strict=False):
        if spec.name in attrs:
            raise TypeError(f"{name}: attribute '{spec.name}' given twice")
        attrs[spec.name] = value
    return Call(o, tuple(_as_exprs(tensors)), Attrs(attrs))


def rounded_product(a: Expr, b: Expr) -> Expr:
    """a * b of two float32 tensors rounded to float32 by itself: the product in float64
    (exact) and cast back, which the code generator emits as one float32 multiply that no
    multiply-add may absorb (codegen's loop_ir.rounded_product) and no pass folds into a
    neighbour (a plain multiply after a convolution FoldScaleAxis folds into its weights).
    What ONNX Runtime computes where it rounds a product before adding it: a
    DequantizeLinear's tensor, a requantize's float32(acc) * multiplier, MLAS's one-row
    depthwise taps."""
    wide = call("multiply", call("cast", a, dtype="float64"), call("cast", b, dtype="float64"))
    return call("cast", wide, dtype="float32")


_CONSTRUCTORS: dict[str, Callable[..., Call]] = {}


def _constructor(o: Op) -> Callable[..., Call]:
    def construct(*args: Any, **attrs: Any) -> Call:
        return call(o.name, *args, **attrs)

    params = [inspect.Parameter(i, inspect.Parameter.POSITIONAL_ONLY) for i in o.inputs]
    if o.variadic:
        params = [inspect.Parameter(o.inputs[0], inspect.Parameter.VAR_POSITIONAL)]
    kind = inspect.Parameter.KEYWORD_ONLY if o.variadic else inspect.Parameter.POSITIONAL_OR_KEYWORD
    params += [
        inspect.Parameter(
            a.name, kind, default=inspect.Parameter.empty if a.default is REQUIRED else a.default
        )
        for a in o.attrs
    ]
    construct.__name__ = construct.__qualname__ = o.name
    construct.__doc__ = o.doc or o.name
    construct.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return construct


def __getattr__(name: str) -> Callable[..., Call]:
    """`op.add`, `op.conv2d`, ...: a constructor for every registered op."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _CONSTRUCTORS:
        try:
            _CONSTRUCTORS[name] = _constructor(get_op(name))
        except KeyError as exc:
            raise AttributeError(str(exc)) from None
    return _CONSTRUCTORS[name]


def __dir__() -> list[str]:
    return sorted([*__all__, *list_ops()])
