"""The loop IR: what a fused kernel is before it becomes LLVM.

Expressions are scalar (one element): constants, loop variables, size variables read when
the kernel runs (a symbolic group's extents: a Dim in a shape becomes them, `dim_expr`),
loads from buffers at a flat element index, arithmetic, math calls, selects and casts.
Statements are loops (the outermost one of each nest runs over a [start, end) range the
executor hands to each thread), stores, and local scalar variables for accumulators.
Buffers are dense row-major arrays passed to the kernel as pointers, in `Kernel.buffers`
order; the last one is the output.

Kept deliberately small: every op's compute definition
(codegen/lower/compute/definitions.py) builds these nodes, codegen/llvm/emit.py turns them
into LLVM IR, and LLVM does the vectorising.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field, fields
from enum import StrEnum

import numpy as np

from egraph_ir.dims import Dim

INDEX = "int64"
LANES = 16  # float32 lanes of the vectors kernels are written for (AVX-512)
# the trip count a loop bound by a size variable is planned with (For.stop gives the real
# one): "long", so nothing is unrolled or masked whole on a guess
RUN_TIME_EXTENT = 1 << 30
MAX_SIZES = 64  # size variables a program's kernels may read (the egc_sizes global)


class BinOp(StrEnum):
    """The binary operations of the loop IR (llvm/emit.py emits each)."""

    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"  # integers: truncating (index arithmetic keeps its operands non-negative)
    REM = "rem"  # integers: the dividend's sign; floats: C fmod
    MIN = "min"
    MAX = "max"
    MAXNUM = "maxnum"  # max that skips NaN
    POW = "pow"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    AND = "and"  # logical on bool, bitwise on integers (as OR and XOR)
    OR = "or"
    XOR = "xor"


class UnOp(StrEnum):
    """The unary operations of the loop IR; LANES_SUM adds a vector's lanes into a scalar."""

    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    SIN = "sin"
    COS = "cos"
    NOT = "not"
    SIGN = "sign"
    LANES_SUM = "lanes_sum"


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True, eq=False)
class LExpr:
    """A scalar (or vector) value. `+ - * // %` build arithmetic in the expression's dtype:
    a Python number on either side becomes a constant of that dtype, and `+`/`*` fold
    adding 0 and multiplying by 1 (add, mul); `//` and `%` are DIV and REM."""

    dtype: str

    def __add__(self, other: LExpr | int | float | Dim) -> LExpr:
        return add(self, _lift(other, self.dtype))

    def __radd__(self, other: int | float) -> LExpr:
        return add(_lift(other, self.dtype), self)

    def __mul__(self, other: LExpr | int | float | Dim) -> LExpr:
        return mul(self, _lift(other, self.dtype))

    def __rmul__(self, other: int | float) -> LExpr:
        return mul(_lift(other, self.dtype), self)

    def __sub__(self, other: LExpr | int | float | Dim) -> LExpr:
        return Bin(self.dtype, BinOp.SUB, self, _lift(other, self.dtype))

    def __rsub__(self, other: int | float) -> LExpr:
        return Bin(self.dtype, BinOp.SUB, _lift(other, self.dtype), self)

    def __floordiv__(self, other: LExpr | int | Dim) -> LExpr:
        return Bin(self.dtype, BinOp.DIV, self, _lift(other, self.dtype))

    def __rfloordiv__(self, other: int) -> LExpr:
        return Bin(self.dtype, BinOp.DIV, _lift(other, self.dtype), self)

    def __mod__(self, other: LExpr | int | Dim) -> LExpr:
        return Bin(self.dtype, BinOp.REM, self, _lift(other, self.dtype))

    def __rmod__(self, other: int) -> LExpr:
        return Bin(self.dtype, BinOp.REM, _lift(other, self.dtype), self)


@dataclass(frozen=True, eq=False)
class Const(LExpr):
    value: float | int | bool


@dataclass(frozen=True, eq=False)
class LoopVar(LExpr):
    name: str


# The first outer index of the calling thread's range. Ranges of concurrent calls are
# disjoint, so a scratch buffer indexed by it is private to the call: each touches only
# its own slot, which stays in cache (the other slots are never used at the same time).
THREAD_SLOT = LoopVar(INDEX, "start")


@dataclass(frozen=True, eq=False)
class Size(LExpr):
    """The value of a size variable, read when the kernel runs: a kernel lowered from a
    symbolic group (`Tensor[(1, 4, past, 32)]`) serves every size
    (codegen/lower/symbolic.py)."""

    name: str


@dataclass(frozen=True, eq=False)
class Load(LExpr):
    buffer: str
    index: LExpr


@dataclass(frozen=True, eq=False)
class Bin(LExpr):
    """Arithmetic (add sub mul div rem min max pow; maxnum: max that skips NaN),
    comparisons (lt le gt ge eq ne) and logic (and or); comparisons have dtype bool."""

    op: str  # a BinOp (StrEnum) once built: a plain name is checked and converted
    a: LExpr
    b: LExpr

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", _checked(BinOp, self.op))


@dataclass(frozen=True, eq=False)
class Un(LExpr):
    """neg abs exp log sqrt tanh sigmoid erf floor ceil round sin cos not sign; lanes_sum
    adds the lanes of a vector (a power-of-two count) into a scalar."""

    op: str  # a UnOp once built
    a: LExpr

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", _checked(UnOp, self.op))


@dataclass(frozen=True, eq=False)
class Select(LExpr):
    cond: LExpr
    a: LExpr
    b: LExpr


@dataclass(frozen=True, eq=False)
class Cast(LExpr):
    a: LExpr
    # the value is known to be an integer the target type holds (exact sums kept in
    # float32): a plain conversion, without the clamps and NaN test of the cast rule
    exact: bool = False


@dataclass(frozen=True, eq=False)
class Splat(LExpr):
    """A scalar broadcast to every lane of a vector dtype ("float32x16")."""

    a: LExpr


@dataclass(frozen=True, eq=False)
class Shuffle(LExpr):
    """Lanes picked from two vectors: lane i is a[mask[i]], or b[mask[i] - n] past the n
    lanes of a (LLVM's shufflevector; register transposes are built from it)."""

    a: LExpr
    b: LExpr
    mask: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Dot4(LExpr):
    """acc plus, in each 32-bit lane, the dot product of the four unsigned bytes of `a`
    with the four signed bytes of `b` (int32 vectors): VNNI's vpdpbusd, the step of an
    int8 convolution (codegen/lower/kernels/conv/int8.py). `pairs`: the products of bytes
    0 and 1 and of bytes 2 and 3 each added and saturated to int16 first (vpmaddubsw then
    vpmaddwd: ONNX Runtime's sums without VNNI, and exact where no pair can overflow)."""

    acc: LExpr
    a: LExpr
    b: LExpr
    pairs: bool = False


@dataclass(frozen=True, eq=False)
class Lookup(LExpr):
    """table[index] for a constant table of at most 256 integers that each fit in a byte
    (a quantised sigmoid's outputs): the index is already within the table. Emitted as
    byte permutes where the CPU has them (codegen/llvm/lookup.py), a gather elsewhere."""

    table: tuple[int, ...]
    index: LExpr


@dataclass(frozen=True, eq=False)
class Ref(LExpr):
    """The current value of a local scalar."""

    name: str


_OPERAND_FIELDS: dict[type, tuple[str, ...]] = {}


def operands(e: LExpr) -> tuple[LExpr, ...]:
    """The expressions `e` computes from (a Bin's two sides, a Load's index ...)."""
    names = _OPERAND_FIELDS.get(type(e))
    if names is None:
        names = tuple(f.name for f in fields(e) if f.type == "LExpr")
        _OPERAND_FIELDS[type(e)] = names
    return tuple(getattr(e, name) for name in names)


def unseen_post_order(root: LExpr, seen: Container[int]) -> list[LExpr]:
    """The expressions `root` is built from (itself included) whose id is not in `seen`,
    each once, after its operands (a worklist: fused chains are deep, operands shared)."""
    out: list[LExpr] = []
    listed: set[int] = set()
    todo: list[tuple[LExpr, bool]] = [(root, False)]
    while todo:
        e, ready = todo.pop()
        if id(e) not in seen and id(e) not in listed:
            if ready:
                listed.add(id(e))
                out.append(e)
            else:
                todo += [(e, True), *((x, False) for x in operands(e))]
    return out


def _checked(kind: type[BinOp] | type[UnOp], op: str) -> BinOp | UnOp:
    """`op` as the enum member: a name the emitter does not know fails here, when the node
    is built, not when LLVM is emitted."""
    try:
        return kind(op)
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise ValueError(f"unknown loop-IR {kind.__name__} '{op}'; known: {known}") from None


def _lift(value: LExpr | int | float | Dim, dtype: str) -> LExpr:
    """A Python number as a constant of `dtype`, a symbolic size as the index expression
    that computes it; an expression as it is."""
    if isinstance(value, LExpr):
        return value
    if isinstance(value, Dim):
        return dim_expr(value)
    return Const(dtype, value)


def rounded_product(e: Cast) -> tuple[LExpr, LExpr] | None:
    """a and b of float32(float64(a) * float64(b)): a float32 product rounded by itself
    (the float64 product of two float32 values is exact), which no multiply-add may
    absorb: codegen/llvm/emit.py emits one float32 multiply without `contract`."""
    product = e.a
    if not (isinstance(product, Bin) and product.op == "mul"):
        return None
    wide, narrow = product.dtype.split("x")[0], e.dtype.split("x")[0]
    if (wide, narrow) != ("float64", "float32"):
        return None
    a, b = (_narrowed(f, e.dtype) for f in (product.a, product.b))
    return None if a is None or b is None else (a, b)


def _narrowed(wide: LExpr, dtype: str) -> LExpr | None:
    """The float32 a float64 factor widens (a cast, or a constant that is a float32)."""
    if isinstance(wide, Cast) and wide.a.dtype == dtype:
        return wide.a
    if isinstance(wide, Const) and dtype == "float32":
        value = float(wide.value)
        return Const(dtype, wide.value) if float(np.float32(value)) == value else None
    return None


def dim_expr(d: int | Dim) -> LExpr:
    """The index expression of a (symbolic) size: its polynomial over Size reads, each
    floordiv atom a division (both sides are never negative)."""
    if not isinstance(d, Dim):
        return Const(INDEX, int(d))
    return d.fold(
        lambda n: Const(INDEX, n),
        lambda name: Size(INDEX, name),
        add,
        mul,
        lambda a, k: Bin(INDEX, "div", a, Const(INDEX, k)),
    )


def const(value: float | int | bool, dtype: str) -> Const:
    return Const(dtype, value)


def idx(value: int | Dim) -> LExpr:
    return dim_expr(value) if isinstance(value, Dim) else Const(INDEX, value)


def add(a: LExpr, b: LExpr) -> LExpr:
    if isinstance(b, Const) and b.value == 0:
        return a
    if isinstance(a, Const) and a.value == 0:
        return b
    return Bin(a.dtype, "add", a, b)


def mul(a: LExpr, b: LExpr) -> LExpr:
    if isinstance(b, Const) and b.value == 1:
        return a
    if isinstance(a, Const) and a.value == 1:
        return b
    if (isinstance(a, Const) and a.value == 0) or (isinstance(b, Const) and b.value == 0):
        return idx(0) if a.dtype == INDEX else Bin(a.dtype, "mul", a, b)
    return Bin(a.dtype, "mul", a, b)


def within(e: LExpr, low: int, high: int) -> LExpr:
    """low <= e < high, for index expressions."""
    return Bin("bool", "and", Bin("bool", "ge", e, idx(low)), Bin("bool", "lt", e, idx(high)))


def clamp(e: LExpr, low: int, high: int) -> LExpr:
    """e limited to [low, high]: keeps a load in bounds where a select discards it."""
    return Bin(INDEX, "min", Bin(INDEX, "max", e, idx(low)), idx(high))


# ---------------------------------------------------------------- statements
@dataclass
class Stmt:
    pass


@dataclass
class For(Stmt):
    var: str
    extent: int | Dim  # a Dim given is made RUN_TIME_EXTENT, with `stop` its value
    body: list[Stmt]
    outer: bool = False  # runs over the thread's [start, end) instead of [0, extent)
    # False: LLVM must not unroll it (a micro-kernel's long reduction); None: as its kernel
    # says; True: unrolled even in a kernel that unrolls nothing else (an epilogue's row,
    # whose math is one long dependency chain per vector)
    unroll: bool | None = None
    # vectorised along it (a row of 14 as one masked 16-lane step, see llvm/emit.py):
    # left alone, LLVM unrolls a short row whole and vectorises the loop around it, the
    # rows, with gathers and scatters
    vectorize: bool = False
    # with vectorize: masked vectors throughout, no scalar remainder (always so for rows
    # shorter than a vector); an int8 epilogue's row of 28 is 20% faster so, a float
    # one's slower (llvm/emit.py)
    masked: bool = False
    # where a loop from 0 stops when that is known at run time only (at most `extent`)
    stop: LExpr | None = None
    # emitted as a function of its own, called where the loop stands: an epilogue's
    # transcendental math keeps its constants out of the registers of the product loop
    # around it (codegen/llvm/outline.py; see `heavy`)
    outline: bool = False

    def __post_init__(self) -> None:
        """A symbolic extent (a loop of a symbolic group) stops at its run-time value."""
        if isinstance(self.extent, Dim):
            if self.stop is None:
                self.stop = dim_expr(self.extent)
            self.extent = RUN_TIME_EXTENT


@dataclass
class Store(Stmt):
    buffer: str
    index: LExpr
    value: LExpr


@dataclass
class Declare(Stmt):
    """A local scalar with an initial value (an accumulator)."""

    name: str
    init: LExpr


@dataclass
class Assign(Stmt):
    name: str
    value: LExpr


# ---------------------------------------------------------------- kernels
@dataclass
class Buffer:
    name: str
    dtype: str
    shape: tuple[int | Dim, ...]


@dataclass
class Kernel:
    """One JIT function `name(buffers..., start, end)`; `extent` is the outer loop's size.
    A kernel of a symbolic group has symbolic extents and shapes, and its Size reads
    take the size variables' values from the global `egc_sizes`, in `size_names` order."""

    name: str
    buffers: list[Buffer]
    body: list[Stmt]
    extent: int | Dim
    work: float | Dim = 0.0  # element operations, to decide whether threads are worth it
    unroll: bool = True  # False: no loop of it is unrolled by LLVM (micro-kernels, copies)
    size_names: tuple[str, ...] = ()
    # a bound symbolic kernel's extent and work as the sizes give them: the glue computes
    # its launch from the sizes when it runs, so the glue too serves every size
    symbolic: tuple[int | Dim, float | Dim] | None = None

    # the values of its scalar buffers, by name: constants the launch binds, so kernels
    # that differ in them share code (codegen/lower/scalars.py)
    scalars: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    body_key: str = field(default="", repr=False, compare=False)  # loop_text.kernel_text


def walk(body: list[Stmt]) -> tuple[list[Stmt], list[LExpr]]:
    """Every statement of a body (loops' bodies included) and every distinct expression
    they hold (a loop's stop too), by worklists: expression trees of long fused chains are
    deep."""
    stmts: list[Stmt] = []
    exprs: list[LExpr] = []
    todo: list[Stmt] = list(reversed(body))
    while todo:
        s = todo.pop()
        stmts.append(s)
        if isinstance(s, For):
            todo += reversed(s.body)
            exprs += [] if s.stop is None else [s.stop]
        elif isinstance(s, Store):
            exprs += [s.index, s.value]
        elif isinstance(s, Declare):
            exprs.append(s.init)
        elif isinstance(s, Assign):
            exprs.append(s.value)
    seen: set[int] = set()
    found: list[LExpr] = []
    while exprs:
        e = exprs.pop()
        if id(e) not in seen:
            seen.add(id(e))
            found.append(e)
            exprs += operands(e)
    return stmts, found


HEAVY_MATH = frozenset({"exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "pow"})


def heavy(body: list[Stmt]) -> bool:
    """Whether statements compute transcendental math (worth a function call of their own
    when they follow a register block: For.outline)."""
    _, exprs = walk(body)
    return any(isinstance(e, Un | Bin) and e.op in HEAVY_MATH for e in exprs)


def statements(body: list[Stmt]) -> int:
    """How many statements a body holds, loops' bodies included (a size, cheaply)."""
    count, todo = 0, list(body)
    while todo:
        s = todo.pop()
        count += 1
        if isinstance(s, For):
            todo += s.body
    return count
