"""IR expressions: immutable nodes compared by identity.

Two `Var("x")` are different variables; use `structural_equal` to compare programs by value.
Each node has one extra slot, the type `infer_type` computed for it (`checked_type`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .attrs import Attrs
from .errors import Span, TypeInferenceError
from .registry import Op
from .types import TensorType, Type, check_dtype

# the text printer (text/printer.py) registers itself here: it imports the node classes,
# so this module cannot import it
_PRINTER: list[Callable[[Expr], str]] = []


def set_printer(print_expr: Callable[[Expr], str]) -> None:
    """Make `str(expr)` print with print_expr (the text format)."""
    _PRINTER[:] = [print_expr]


class Expr:
    """Base class of expressions. Hash and equality are by identity."""

    __slots__ = ("__weakref__", "_checked_type")

    @property
    def checked_type(self) -> Type:
        """The type inferred by `infer_type`; an error before inference."""
        try:
            return self._checked_type  # type: ignore[attr-defined]
        except AttributeError:
            raise TypeInferenceError(
                f"type of {short_repr(self)} not inferred; run infer_type first"
            ) from None

    @property
    def has_type(self) -> bool:
        return hasattr(self, "_checked_type")

    def _set_type(self, ty: Type) -> None:
        object.__setattr__(self, "_checked_type", ty)

    def __str__(self) -> str:
        return _PRINTER[0](self) if _PRINTER else object.__repr__(self)


@dataclass(frozen=True, eq=False, slots=True)
class Var(Expr):
    """A variable: a function parameter or a let-bound name."""

    name_hint: str
    type_annotation: Type | None = None
    span: Span | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Var({self.name_hint!r}, {self.type_annotation})"


@dataclass(frozen=True, eq=False, slots=True)
class Constant(Expr):
    """A constant tensor. The array is copied once and made read-only."""

    data: np.ndarray
    span: Span | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        arr = np.array(self.data, copy=True)
        check_dtype(str(arr.dtype))
        arr.flags.writeable = False
        object.__setattr__(self, "data", arr)

    @property
    def type(self) -> TensorType:
        return TensorType(self.data.shape, str(self.data.dtype))

    def __repr__(self) -> str:
        return f"Constant({self.type})"


@dataclass(frozen=True, slots=True)
class GlobalVar(Expr):
    """The name of a function in an IRModule; equal when the names are equal."""

    name_hint: str

    def __repr__(self) -> str:
        return f"@{self.name_hint}"


@dataclass(frozen=True, eq=False, slots=True)
class Call(Expr):
    """Apply an operator, a function or a function-valued variable to arguments.

    For operators, attrs are validated against the registry and completed with defaults.
    """

    op: Op | Function | GlobalVar | Var
    args: tuple[Expr, ...]
    attrs: Attrs = Attrs.EMPTY
    span: Span | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        args = tuple(self.args)
        for a in args:
            if not isinstance(a, Expr):
                raise TypeError(f"argument of a call must be an Expr, got {type(a).__name__}")
        object.__setattr__(self, "args", args)
        if isinstance(self.op, Op):
            object.__setattr__(self, "attrs", self.op.normalize_attrs(self.attrs, len(args)))
        elif not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    def __repr__(self) -> str:
        return f"Call({short_repr(self)})"

    def with_same_type(self, **attrs: Any) -> Call:
        """This call with some attributes changed that do not change its type (how a sum
        is computed, say), the type it has kept: no inference needed to read it."""
        out = Call(self.op, self.args, Attrs({**self.attrs, **attrs}), self.span)
        if self.has_type:
            out._set_type(self.checked_type)
        return out


@dataclass(frozen=True, eq=False, slots=True)
class Tuple(Expr):
    """A tuple of values."""

    fields: tuple[Expr, ...]
    span: Span | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True, eq=False, slots=True)
class TupleGetItem(Expr):
    """Field `index` of a tuple value."""

    tuple_value: Expr
    index: int
    span: Span | None = field(default=None, repr=False)


@dataclass(frozen=True, eq=False, slots=True)
class Function(Expr):
    """A function. attrs carry pipeline markers (Primitive, Composite, Compiler, ...)."""

    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    attrs: Attrs = Attrs.EMPTY
    span: Span | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        params = tuple(self.params)
        for p in params:
            if not isinstance(p, Var):
                raise TypeError(f"function parameters must be Vars, got {type(p).__name__}")
        object.__setattr__(self, "params", params)
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    def with_attr(self, name: str, value: Any) -> Function:
        """Return a copy with one attribute set."""
        return Function(self.params, self.body, self.ret_type, self.attrs.with_(**{name: value}))

    def with_body(self, body: Expr) -> Function:
        return Function(self.params, body, self.ret_type, self.attrs, self.span)


@dataclass(frozen=True, eq=False, slots=True)
class Let(Expr):
    """Bind `var` to `value` in `body`."""

    var: Var
    value: Expr
    body: Expr
    span: Span | None = field(default=None, repr=False)


@dataclass(frozen=True, eq=False, slots=True)
class If(Expr):
    """Evaluate one branch depending on a scalar boolean condition."""

    cond: Expr
    true_branch: Expr
    false_branch: Expr
    span: Span | None = field(default=None, repr=False)


def children(e: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of a node, in evaluation order (the callee comes first)."""
    match e:
        case Call():
            return (e.op, *e.args) if isinstance(e.op, Expr) else e.args
        case Tuple():
            return e.fields
        case TupleGetItem():
            return (e.tuple_value,)
        case Function():
            return (*e.params, e.body)
        case Let():
            return (e.value, e.var, e.body)
        case If():
            return (e.cond, e.true_branch, e.false_branch)
        case _:
            return ()


def operands(e: Expr) -> tuple[Expr, ...]:
    """What a dataflow node computes from: a call's arguments (and its callee where that is
    an expression), a tuple's fields, a projection's tuple; nothing for every other node
    (functions, lets and ifs hold scopes and branches, not operands)."""
    return children(e) if isinstance(e, Call | Tuple | TupleGetItem) else ()


def op_name(e: Expr) -> str | None:
    """The registered op a call applies, by name; None for anything else."""
    return e.op.name if isinstance(e, Call) and isinstance(e.op, Op) else None


def short_repr(e: Expr) -> str:
    """A one-line description of a node for error messages (no recursion into children)."""
    match e:
        case Var():
            return f"%{e.name_hint}"
        case GlobalVar():
            return f"@{e.name_hint}"
        case Constant():
            return f"constant {e.type}"
        case Call():
            callee = getattr(e.op, "name", None) or short_repr(e.op)  # type: ignore[arg-type]
            args = ", ".join(_arg_desc(a) for a in e.args)
            return f"{callee}({args})"
        case Tuple():
            return f"tuple of {len(e.fields)}"
        case TupleGetItem():
            return f"field {e.index} of {short_repr(e.tuple_value)}"
        case Function():
            return f"fn of {len(e.params)} parameter(s)"
        case Let():
            return f"let %{e.var.name_hint}"
        case If():
            return "if"
        case _:
            return type(e).__name__


def _arg_desc(a: Expr) -> str:
    name = f"%{a.name_hint}" if isinstance(a, Var) else getattr(getattr(a, "op", None), "name", "")
    ty = getattr(a, "_checked_type", None)
    if ty is None and isinstance(a, Constant):
        ty = a.type
    if ty is None:
        return name or type(a).__name__.lower()
    return f"{name}: {ty}" if name else str(ty)


# ---------------------------------------------------------------- convenience constructors
def var(
    name: str,
    type_: Type | None = None,
    *,
    shape: Sequence[int] | None = None,
    dtype: str = "float32",
) -> Var:
    """Make a variable; `shape=` (with `dtype=`) is a shortcut for a TensorType."""
    if type_ is None and shape is not None:
        type_ = TensorType(tuple(shape), dtype)
    return Var(name, type_)


def const(value: Any, dtype: str | None = None) -> Constant:
    """Make a constant. Python floats default to float32 and ints to int32, as in Relay."""
    if dtype is None and isinstance(value, float):
        dtype = "float32"
    elif dtype is None and isinstance(value, bool):
        dtype = "bool"
    elif dtype is None and isinstance(value, int):
        dtype = "int32"
    arr = np.asarray(value, dtype=dtype)
    if dtype is None and arr.dtype == np.float64 and not isinstance(value, np.ndarray):
        arr = arr.astype(np.float32)
    return Constant(arr)


def tuple_(fields: Iterable[Expr]) -> Tuple:
    return Tuple(tuple(fields))


def attrs_of(items: Mapping[str, Any] | None) -> Attrs:
    return items if isinstance(items, Attrs) else Attrs(items)
