"""The op registry: every operator is one `Op` entry, data rather than a class per op.

An entry states what an operator is: its inputs, typed attributes with defaults, a type
relation, a numpy reference, a fusion pattern and a cost. Everything else (type inference, the
interpreter, the text format, rules, fusion, cost models) reads these entries.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .attrs import Attrs, freeze
from .device import VirtualDevice, as_device
from .dims import Dim
from .errors import AttrError, CompilerError, TypeInferenceError, UnknownOpError, did_you_mean
from .types import DTYPES, TensorType, Type, priced, tensor_types


class OpPattern(enum.IntEnum):
    """Fusion patterns, ordered as in TVM: lower values fuse more freely."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    OPAQUE = 8


class ShapeError(TypeInferenceError):
    """Raised by a type relation; infer_type adds the op, argument types and location."""


@dataclass(frozen=True, slots=True)
class Cost:
    """Work of one op application: floating-point operations and bytes read plus written."""

    flops: float
    bytes: float

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes + other.bytes)


REQUIRED = object()  # marks an attribute without a default

# Attribute kinds and the Python values they accept (after freezing lists into tuples).
ATTR_KINDS = (
    "int",
    "float",
    "bool",
    "str",
    "dtype",
    "ints",
    "axes",
    "int?",
    "int|ints",
    "pairs",
    "ints?",
    "device",
    "dim",
    "dims",
)


@dataclass(frozen=True, slots=True)
class AttrSpec:
    """One typed attribute of an op. `choices` restricts string values."""

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()

    def check(self, op: str, value: Any) -> Any:
        """Return the normalised value or raise AttrError naming the op and attribute."""
        value = freeze(value)
        ok, norm = _convert(self.kind, value)
        if not ok:
            raise AttrError(
                f"{op}: attribute '{self.name}' expects {_KIND_DOC[self.kind]}, got {value!r}"
            )
        if self.choices and norm not in self.choices:
            raise AttrError(
                f"{op}: attribute '{self.name}' must be one of {', '.join(self.choices)}; "
                f"got {norm!r}"
            )
        return norm


_KIND_DOC = {
    "int": "an int",
    "float": "a number",
    "bool": "a bool",
    "str": "a string",
    "dtype": f"a dtype ({', '.join(DTYPES)})",
    "ints": "a tuple of ints",
    "axes": "None, an int or a tuple of ints",
    "int?": "None or an int",
    "int|ints": "an int or a tuple of ints",
    "pairs": "a tuple of (before, after) int pairs",
    "ints?": "None or a tuple of ints",
    "device": "a VirtualDevice (or its short form, e.g. 'cpu:1')",
    "dim": "an int or a size expression (a Dim)",
    "dims": "a tuple of ints and size expressions (Dims)",
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_dim(v: Any) -> bool:
    return _is_int(v) or isinstance(v, Dim)


_SCALAR_KINDS: dict[str, Callable[[Any], bool]] = {
    "int": _is_int,
    "str": lambda v: isinstance(v, str),
    "dtype": lambda v: isinstance(v, str) and v in DTYPES,
    "int?": lambda v: v is None or _is_int(v),
    "dim": _is_dim,
}


def _convert(kind: str, v: Any) -> tuple[bool, Any]:
    if kind in _SCALAR_KINDS:
        return _SCALAR_KINDS[kind](v), v
    if kind == "float":
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        return ok, float(v) if ok else v
    if kind == "bool":
        if _is_int(v) and v in (0, 1):
            return True, bool(v)
        return isinstance(v, bool), v
    if kind in ("ints", "dims"):
        one = _is_int if kind == "ints" else _is_dim
        if one(v):
            return True, (v,)
        return isinstance(v, tuple) and all(one(x) for x in v), v
    if kind in ("axes", "ints?"):
        if v is None:
            return True, None
        return _convert("ints", v)
    if kind == "int|ints":
        if _is_int(v):
            return True, v
        return isinstance(v, tuple) and all(_is_int(x) for x in v), v
    if kind == "pairs":
        ok = isinstance(v, tuple) and all(
            isinstance(p, tuple) and len(p) == 2 and all(_is_int(x) for x in p) for p in v
        )
        return ok, v
    if kind == "device":
        if isinstance(v, VirtualDevice):
            return True, v
        try:
            return isinstance(v, str), as_device(v)
        except CompilerError:
            return False, v
    raise AssertionError(kind)


InferFn = Callable[[list[TensorType], Attrs], Type]
CostFn = Callable[[list[TensorType], Type, Attrs], float]


@dataclass(frozen=True, slots=True)
class Op:
    """One registered operator.

    `infer` maps argument tensor types and attrs to the result type (raising ShapeError);
    `reference` computes the result with numpy from arrays and attrs (keyword arguments);
    `flops` estimates floating-point work from types (bytes are derived from the types).
    A variadic op (concatenate) takes one or more tensors for its single declared input.
    An `annotation` op (compiler_begin, on_device, ...) marks a dataflow edge: it returns its
    one input unchanged, tuples included.
    """

    name: str
    inputs: tuple[str, ...]
    infer: InferFn
    reference: Callable[..., Any]
    pattern: OpPattern
    flops: CostFn
    attrs: tuple[AttrSpec, ...] = ()
    variadic: bool = False
    doc: str = ""
    annotation: bool = False  # a no-op marker: its result is its input, of any type
    foldable: bool = True  # False: constant folding leaves its calls alone (dequantize)
    _attr_index: dict[str, AttrSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._attr_index.update({a.name: a for a in self.attrs})

    def __repr__(self) -> str:
        return f"Op({self.name})"

    @property
    def num_inputs(self) -> int | None:
        """The number of tensor inputs, or None for a variadic op."""
        return None if self.variadic else len(self.inputs)

    def attr_spec(self, name: str) -> AttrSpec | None:
        return self._attr_index.get(name)

    def normalize_attrs(self, attrs: Mapping[str, Any] | None, nargs: int) -> Attrs:
        """Check arity and attributes; fill defaults. Raises AttrError/TypeInferenceError."""
        if self.variadic:
            if nargs < 1:
                raise TypeInferenceError(f"{self.name}: expects at least one input, got 0")
        elif nargs != len(self.inputs):
            raise TypeInferenceError(
                f"{self.name}: expects {len(self.inputs)} input(s) "
                f"({', '.join(self.inputs)}), got {nargs}"
            )
        given = dict(attrs or {})
        out: dict[str, Any] = {}
        for key in given:
            if key not in self._attr_index:
                known = ", ".join(self._attr_index) or "none"
                raise AttrError(
                    f"{self.name}: unknown attribute '{key}'"
                    f"{did_you_mean(key, self._attr_index)}; known: {known}"
                )
        for spec in self.attrs:
            if spec.name in given:
                out[spec.name] = spec.check(self.name, given[spec.name])
            elif spec.default is REQUIRED:
                raise AttrError(f"{self.name}: missing required attribute '{spec.name}'")
            else:
                out[spec.name] = spec.default
        return Attrs(out)

    def evaluate(self, args: list[np.ndarray], attrs: Attrs) -> Any:
        """Run the numpy reference (floating-point warnings silenced: inf/nan are values).
        float16 follows one rule, the compiled code's too: an op computes in float32 and
        rounds its float16 result once (products and sums accumulate in float32; for
        + - * / and sqrt this is float16 arithmetic exactly, float32 having more than
        twice its precision)."""
        if self.annotation:
            return args[0]
        half = _half_op(args, attrs)
        if half:
            args = [a.astype(np.float32) if a.dtype == np.float16 else a for a in args]
        with np.errstate(all="ignore"):
            result = self.reference(*args, **attrs)
            results = result if isinstance(result, tuple) else (result,)
            arrays = tuple(np.asarray(r) for r in results)
            if half:  # overflow to infinity is the rounding's, silently
                arrays = tuple(a.astype(np.float16) if a.dtype == np.float32 else a for a in arrays)
        return arrays if isinstance(result, tuple) else arrays[0]

    def cost(self, arg_types: list[TensorType], out_type: Type, attrs: Attrs) -> Cost:
        """FLOPs from the op's estimate; bytes = inputs read + outputs written. Symbolic
        sizes count at their typical values (dims.typical)."""
        arg_types = [priced(t) for t in arg_types]
        out_type = priced(out_type)
        moved = sum(t.nbytes for t in arg_types) + sum(t.nbytes for t in tensor_types(out_type))
        return Cost(float(self.flops(arg_types, out_type, attrs)), float(moved))


def _half_op(args: list[np.ndarray], attrs: Attrs) -> bool:
    """An op on float16 values (and no wider float) whose result dtype follows its inputs
    (not a cast to an attribute's dtype)."""
    dtypes = {a.dtype for a in args if isinstance(a, np.ndarray)}
    wide = {np.dtype(np.float32), np.dtype(np.float64)}
    return np.dtype(np.float16) in dtypes and not dtypes & wide and "dtype" not in attrs


REGISTRY: dict[str, Op] = {}


def register_op(op: Op) -> Op:
    """Add an op to the registry; a second op of the same name is an error."""
    if op.name in REGISTRY:
        raise ValueError(f"op '{op.name}' is already registered")
    REGISTRY[op.name] = op
    return op


def get_op(name: str) -> Op:
    """Look up an op by name; unknown names get a 'did you mean'."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownOpError(f"unknown op '{name}'{did_you_mean(name, REGISTRY)}") from None


def list_ops() -> list[str]:
    """The names of all registered ops, sorted."""
    return sorted(REGISTRY)
