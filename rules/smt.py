"""What the prover (rules/proofs.py) says to z3: each dtype's values as z3 terms
(IEEE floats, bit-vectors that wrap, booleans, or reals for fast-math rules) and each op
of the fragment as numpy computes it, checked against the ops' numpy references by
tests/rules/test_proofs.py. A pointwise op outside the fragment is a function z3 knows
nothing of; anything else is `OutsideFragment`."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_ir.egraph.pattern import AttrVar, Pattern, PCall, PLit, PVar
from egraph_ir.errors import CompilerError
from egraph_ir.registry import OpPattern, get_op

FLOAT_BITS = {"float16": (5, 11), "bfloat16": (8, 8), "float32": (8, 24), "float64": (11, 53)}
ARITHMETIC = {"add", "subtract", "multiply", "divide"}
COMPARISONS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
LOGICAL = {"logical_and", "logical_or", "logical_not"}
FRAGMENT = ARITHMETIC | COMPARISONS | LOGICAL | {
    "negative", "abs", "sqrt", "maximum", "minimum", "relu", "where", "cast", "zeros_like",
    "ones_like",
}  # fmt: skip


class OutsideFragment(Exception):
    """The rule uses what the prover does not model (its message says what)."""


def pointwise(op: str) -> bool:
    """Is each element of the op's result a function of its arguments' elements at the
    same (broadcast) index alone? Such an op outside the fragment is modelled as a
    function the solver knows nothing of (a proof then holds whatever the op computes);
    an op that moves or mixes elements (transpose, a reduction) is not: two tensors equal
    at one index need not give equal results there."""
    try:
        o = get_op(op)
    except CompilerError:
        return False
    return o.pattern <= OpPattern.BROADCAST and {a.name for a in o.attrs} <= {"dtype"}


class Encoder:
    """Patterns as z3 terms of one dtype assignment; variables made as met."""

    def __init__(self, z3: Any, types: dict[str, str], attrs: dict[str, str], real: bool) -> None:
        self.z3, self.types, self.attrs, self.real = z3, types, attrs, real
        self.variables: dict[str, Any] = {}
        self.infinite: list[Any] = []  # over the reals: a division of a number by zero
        self.undefined: list[Any] = []  # ... and of zero by zero (NaN)
        self.opaque: set[str] = set()  # ops modelled as functions it knows nothing of
        # every arithmetic op as a function z3 knows nothing of: a proof then holds
        # whatever they compute (tried first where elements only move: cheap to prove)
        self.abstract = False

    def sort(self, dtype: str) -> Any:
        z3 = self.z3
        if dtype == "bool":
            return z3.BoolSort()
        if self.real:
            return z3.RealSort()
        if dtype in FLOAT_BITS:
            return z3.FPSort(*FLOAT_BITS[dtype])
        return z3.BitVecSort(np.dtype(dtype).itemsize * 8)

    def constant(self, value: float, dtype: str) -> Any:
        z3 = self.z3
        if dtype == "bool":
            return z3.BoolVal(bool(value))
        if self.real:
            return z3.RealVal(float(value))
        if dtype in FLOAT_BITS:
            return z3.FPVal(float(value), self.sort(dtype))
        return z3.BitVecVal(int(value), self.sort(dtype))

    def encode(self, p: Pattern, dtype: str) -> tuple[Any, str]:
        """p's term and dtype; `dtype`: what a literal here takes."""
        if isinstance(p, PVar):
            if p.name not in self.variables:
                self.variables[p.name] = self.z3.Const(p.name, self.sort(self.types[p.name]))
            return self.variables[p.name], self.types[p.name]
        if isinstance(p, PLit):
            return self.constant(p.value, dtype), dtype
        assert isinstance(p, PCall)
        sibling = next((self.types[a.name] for a in p.args if isinstance(a, PVar)), dtype)
        args = [
            self.encode(a, sibling if sibling != "bool" or p.op in LOGICAL else dtype)
            for a in p.args
        ]
        return self.op(p, args)

    def op(self, p: PCall, args: list[tuple[Any, str]]) -> tuple[Any, str]:
        z3, name = self.z3, p.op
        terms = [t for t, _ in args]
        dtype = args[-1][1] if args else "float32"
        if self.abstract and name not in LOGICAL | {"where", "zeros_like", "ones_like"}:
            out = "bool" if name in COMPARISONS else dtype
            out = str(_attr(p, self.attrs, "dtype")) if name == "cast" else out
            return self.unknown_function(p, args, out), out
        if name == "where":
            return z3.If(terms[0], terms[1], terms[2]), args[1][1]
        if name in LOGICAL:
            fn = {"logical_and": z3.And, "logical_or": z3.Or, "logical_not": z3.Not}[name]
            return fn(*terms), "bool"
        if name in COMPARISONS:
            return self.compare(name, terms[0], terms[1], args[0][1]), "bool"
        if name in ("zeros_like", "ones_like"):
            return self.constant(0 if name == "zeros_like" else 1, dtype), dtype
        if name == "cast":
            target = str(_attr(p, self.attrs, "dtype"))
            try:
                return self.cast(terms[0], args[0][1], target), target
            except OutsideFragment:
                return self.unknown_function(p, args, target), target
        try:
            if dtype == "bool":
                raise OutsideFragment(f"{name} of booleans is outside the prover's fragment")
            return self.arithmetic(name, terms, dtype), dtype
        except OutsideFragment:
            if not pointwise(name):
                raise
            return self.unknown_function(p, args, dtype), dtype

    def unknown_function(self, p: PCall, args: list[tuple[Any, str]], dtype: str) -> Any:
        """A pointwise op the solver does not model: a function of its arguments that it
        knows nothing else of (one per op, attributes and dtypes)."""
        z3 = self.z3
        key = f"{p.op}{sorted(p.attrs)}{[d for _, d in args]}->{dtype}"
        self.opaque.add(p.op)
        sorts = [self.sort(d) for _, d in args]
        fn = z3.Function(key, *sorts, self.sort(dtype))
        return fn(*[t for t, _ in args])

    def compare(self, name: str, a: Any, b: Any, dtype: str) -> Any:
        """A comparison as numpy makes it: IEEE for floats (NaN compares false, -0.0
        equals 0.0), signed or unsigned for integers."""
        z3 = self.z3
        lt: Callable[[Any, Any], Any] = lambda x, y: x < y  # noqa: E731
        le: Callable[[Any, Any], Any] = lambda x, y: x <= y  # noqa: E731
        if dtype in FLOAT_BITS and not self.real:
            lt, le = z3.fpLT, z3.fpLEQ
            eq: Callable[[Any, Any], Any] = z3.fpEQ
        else:
            eq = lambda x, y: x == y  # noqa: E731
            if dtype not in FLOAT_BITS and dtype != "bool" and np.dtype(dtype).kind == "u":
                lt, le = z3.ULT, z3.ULE
        table = {
            "equal": lambda: eq(a, b), "not_equal": lambda: z3.Not(eq(a, b)),
            "less": lambda: lt(a, b), "less_equal": lambda: le(a, b),
            "greater": lambda: lt(b, a), "greater_equal": lambda: le(b, a),
        }  # fmt: skip
        return table[name]()

    def arithmetic(self, name: str, terms: list[Any], dtype: str) -> Any:
        if self.real:
            return self._real(name, terms)
        if dtype in FLOAT_BITS:
            return self._float(name, terms, dtype)
        return self._integer(name, terms, dtype)

    def _real(self, name: str, t: list[Any]) -> Any:
        z3 = self.z3
        if name == "divide":  # by zero: an infinity (no claim), or NaN for 0 / 0
            self.infinite.append(z3.And(t[1] == 0, t[0] != 0))
            self.undefined.append(z3.And(t[1] == 0, t[0] == 0))
            return t[0] / t[1]
        simple = {
            "add": lambda: t[0] + t[1], "subtract": lambda: t[0] - t[1],
            "multiply": lambda: t[0] * t[1], "negative": lambda: -t[0],
            "abs": lambda: z3.If(t[0] < 0, -t[0], t[0]),
            "maximum": lambda: z3.If(t[0] > t[1], t[0], t[1]),
            "minimum": lambda: z3.If(t[0] < t[1], t[0], t[1]),
            "relu": lambda: z3.If(t[0] > 0, t[0], z3.RealVal(0)),
        }  # fmt: skip
        if name not in simple:
            raise OutsideFragment(f"{name} over the reals is outside the prover's fragment")
        return simple[name]()

    def _float(self, name: str, t: list[Any], dtype: str) -> Any:
        """IEEE semantics in the dtype's own format. A float16 or bfloat16 op computes in
        float32 and rounds once, which for +, -, *, / and sqrt equals rounding the exact
        result once: float32's 24 bits are at least twice the narrow format's plus two
        (Figueroa's condition for innocuous double rounding)."""
        z3 = self.z3
        rne = z3.RNE()
        nan, zero = z3.fpNaN(self.sort(dtype)), z3.FPVal(0.0, self.sort(dtype))
        either_nan = z3.Or(z3.fpIsNaN(t[0]), z3.fpIsNaN(t[-1]))
        table = {
            "add": lambda: z3.fpAdd(rne, t[0], t[1]),
            "subtract": lambda: z3.fpSub(rne, t[0], t[1]),
            "multiply": lambda: z3.fpMul(rne, t[0], t[1]),
            "divide": lambda: z3.fpDiv(rne, t[0], t[1]),
            "negative": lambda: z3.fpNeg(t[0]),
            "abs": lambda: z3.fpAbs(t[0]),
            "sqrt": lambda: z3.fpSqrt(rne, t[0]),
            # numpy: NaN if either is; of two equal values (0.0 and -0.0), the second
            "maximum": lambda: z3.If(either_nan, nan, z3.If(z3.fpGT(t[0], t[1]), t[0], t[1])),
            "minimum": lambda: z3.If(either_nan, nan, z3.If(z3.fpLT(t[0], t[1]), t[0], t[1])),
            "relu": lambda: z3.If(either_nan, nan, z3.If(z3.fpGT(t[0], zero), t[0], zero)),
        }
        if name not in table:
            raise OutsideFragment(f"{name} on floats is outside the prover's fragment")
        return table[name]()

    def _integer(self, name: str, t: list[Any], dtype: str) -> Any:
        z3 = self.z3
        signed = np.dtype(dtype).kind == "i"
        gt = (lambda x, y: x > y) if signed else z3.UGT
        lt = (lambda x, y: x < y) if signed else z3.ULT
        table = {
            "add": lambda: t[0] + t[1], "subtract": lambda: t[0] - t[1],
            "multiply": lambda: t[0] * t[1], "negative": lambda: -t[0],
            "abs": lambda: z3.If(lt(t[0], 0), -t[0], t[0]) if signed else t[0],
            "maximum": lambda: z3.If(gt(t[0], t[1]), t[0], t[1]),
            "minimum": lambda: z3.If(lt(t[0], t[1]), t[0], t[1]),
            "relu": lambda: z3.If(gt(t[0], 0), t[0], z3.BitVecVal(0, t[0].size())),
        }  # fmt: skip
        if name not in table:  # integer division rounds as numpy's does: not modelled
            raise OutsideFragment(f"{name} on integers is outside the prover's fragment")
        return table[name]()

    def cast(self, x: Any, source: str, target: str) -> Any:
        z3 = self.z3
        if source == target:
            return x
        if self.real and source != "bool" and target != "bool":
            return x  # exact arithmetic: a cast between number types changes nothing
        rne = z3.RNE()
        if source in FLOAT_BITS and target in FLOAT_BITS:
            return z3.fpToFP(rne, x, self.sort(target))
        if source not in FLOAT_BITS and source != "bool" and target in FLOAT_BITS:
            signed = np.dtype(source).kind == "i"
            convert = z3.fpSignedToFP if signed else z3.fpUnsignedToFP
            return convert(rne, x, self.sort(target))
        if source not in FLOAT_BITS and target not in FLOAT_BITS and "bool" not in (source, target):
            width = np.dtype(target).itemsize * 8
            have = np.dtype(source).itemsize * 8
            if width <= have:
                return z3.Extract(width - 1, 0, x)
            extend = z3.SignExt if np.dtype(source).kind == "i" else z3.ZeroExt
            return extend(width - have, x)
        raise OutsideFragment(f"a cast from {source} to {target} is outside the prover's fragment")

    def same(self, a: Any, b: Any, dtype: str, nsz: bool) -> Any:
        """Equal as the compiler promises: NaN meets NaN, zeros by sign unless nsz."""
        z3 = self.z3
        if dtype in FLOAT_BITS and not self.real:
            equal = a == b  # SMT-LIB equality: every NaN alike, -0.0 apart from 0.0
            if nsz:
                return z3.Or(equal, z3.And(z3.fpIsZero(a), z3.fpIsZero(b)))
            return equal
        return a == b

    def flagged(self, make: Callable[[], Any]) -> tuple[Any, Any, Any]:
        """What `make()` encodes, and whether over the reals it divided a number by zero
        (infinite) or zero by zero (NaN) on the way."""
        self.infinite, self.undefined = [], []
        made = make()
        return made, self.z3.Or(False, *self.infinite), self.z3.Or(False, *self.undefined)

    def agree(
        self, left: tuple[Any, Any, Any], right: tuple[Any, Any, Any], dtype: str, nsz: bool
    ) -> Any:
        """The sides (term, infinite, NaN) agree as a rule claims: `same`; over the reals
        (fast-math) as the soundness checker has it: an infinite left side claims
        nothing, NaN meets NaN, a finite left side needs a finite right one."""
        (a, a_inf, a_nan), (b, b_inf, b_nan) = left, right
        z3, same = self.z3, self.same(a, b, dtype, nsz)
        if not self.real:
            return same
        numbers = z3.And(z3.Not(b_inf), same)
        return z3.Or(a_inf, z3.If(z3.Or(a_nan, b_nan), z3.And(a_nan, b_nan), numbers))

    def value(self, model: Any, name: str) -> Any:
        """A variable's value in a model, as a numpy scalar of its dtype."""
        term = model.eval(self.variables[name], model_completion=True)
        return self.to_numpy(term, self.types[name])

    def to_numpy(self, term: Any, dtype: str) -> Any:
        """A numeral of the model as a numpy scalar of `dtype`."""
        z3 = self.z3
        if dtype == "bool":
            return np.bool_(z3.is_true(term))
        if self.real:
            return float(term.as_fraction()) if hasattr(term, "as_fraction") else float(str(term))
        if dtype in FLOAT_BITS:
            return float_value(z3, term, dtype)
        raw = int(term.as_long())
        width = np.dtype(dtype).itemsize * 8
        if np.dtype(dtype).kind == "i" and raw >= 1 << (width - 1):
            raw -= 1 << width
        return np.array(raw, dtype=dtype)[()]


def float_value(z3: Any, term: Any, dtype: str) -> Any:
    """A z3 floating-point numeral as a numpy scalar of `dtype` (NaN has no one bit
    pattern in z3: numpy's own NaN then)."""
    if term.isNaN():
        return np.asarray(np.nan, dtype=numpy_dtype(dtype))[()]
    bits = z3.simplify(z3.fpToIEEEBV(term)).as_long()
    return _float_from_bits(int(bits), dtype)


def numpy_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype)


def _float_from_bits(bits: int, dtype: str) -> Any:
    if dtype == "float64":
        return np.float64(struct.unpack("<d", struct.pack("<Q", bits))[0])
    if dtype == "float32":
        return np.float32(struct.unpack("<f", struct.pack("<I", bits))[0])
    if dtype == "float16":
        return np.frombuffer(struct.pack("<H", bits), np.float16)[0]
    import ml_dtypes  # bfloat16: numpy's extension type, as the compiler uses it

    return np.frombuffer(struct.pack("<H", bits), ml_dtypes.bfloat16)[0]


def _attr(p: PCall, attrs: dict[str, str], name: str) -> Any:
    value = dict(p.attrs).get(name)
    if isinstance(value, AttrVar):
        return attrs[value.name]
    if value is None:
        raise OutsideFragment(f"{p.op} without its {name} attribute is outside the fragment")
    return value


__all__ = [
    "FLOAT_BITS",
    "FRAGMENT",
    "LOGICAL",
    "Encoder",
    "OutsideFragment",
    "float_value",
    "numpy_dtype",
    "pointwise",
]
