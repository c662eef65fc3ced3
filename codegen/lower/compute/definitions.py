"""Compute definitions: each op's output element as a scalar loop-IR expression.

A definition gets the output index and one *reader* per input (a function from an index in
that input's shape to the element there), and returns the element. Producers inside a fused
group are readers too, so a whole group inlines into one expression per output element:
no intermediate buffer, which is the point of fusion (TVM 0.27 keeps them and pays 5x).

Indices are kept flat (one linear offset) as long as shapes agree, and only turned into
per-axis indices (div/mod) where broadcasting, transposes or slices need them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_ir.dims import Dim, ShapeDecisionError
from egraph_ir.op.creation import fill_element
from egraph_ir.op.elementwise import clip_bounds
from egraph_ir.op.layout import parse_layout, split_factor
from egraph_ir.op.shape import slice_spec, symbolic_bounds
from egraph_ir.types import TensorType

from ...loop_ir import INDEX, Bin, Cast, Const, LExpr, Select, Un, clamp, const, idx


class Index:
    """A position in a tensor of `shape`, as a flat offset or per-axis indices."""

    def __init__(
        self, shape: tuple[int, ...], multi: list[LExpr] | None = None, flat: LExpr | None = None
    ) -> None:
        self.shape, self._multi, self._flat = shape, multi, flat

    def flat(self) -> LExpr:
        if self._flat is None:
            assert self._multi is not None
            total: LExpr = idx(0)
            for i, stride in zip(self._multi, strides(self.shape), strict=True):
                total = total + i * stride
            self._flat = total
        return self._flat

    def has_multi(self) -> bool:
        """Per-axis indices are known (a loop per axis), not only a flat offset."""
        return self._multi is not None

    def multi(self) -> list[LExpr]:
        if self._multi is None:
            assert self._flat is not None
            out: list[LExpr] = []
            for dim, stride in zip(self.shape, strides(self.shape), strict=True):
                if dim == 1:
                    out.append(idx(0))
                    continue
                q = self._flat if stride == 1 else self._flat // stride
                out.append(q if stride * dim == math.prod(self.shape) else q % dim)
            self._multi = out
        return self._multi


def strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


Reader = Callable[[Index], LExpr]


class Ctx:
    """What a compute definition sees."""

    def __init__(
        self,
        attrs: Any,
        in_types: list[TensorType],
        out: TensorType,
        readers: list[Reader],
        index: Index,
        data: list[np.ndarray | None] | None = None,
    ) -> None:
        self.attrs, self.in_types, self.out, self.readers, self.index = (
            attrs,
            in_types,
            out,
            readers,
            index,
        )
        self.data = data  # the values of the inputs that are constants

    def arg(self, i: int) -> LExpr:
        """Input i at the output position, broadcasting as numpy does."""
        return self.readers[i](broadcast_index(self.index, self.out.shape, self.in_types[i].shape))

    def c(self, value: float | int | bool, dtype: str | None = None) -> Const:
        return const(value, dtype or self.out.dtype)


def broadcast_index(index: Index, out_shape: tuple[int, ...], in_shape: tuple[int, ...]) -> Index:
    if in_shape == out_shape:
        return index
    multi = index.multi()[len(out_shape) - len(in_shape) :]
    picked = [idx(0) if d == 1 else m for d, m in zip(in_shape, multi, strict=True)]
    return Index(in_shape, multi=picked)


Compute = Callable[[Ctx], LExpr]
COMPUTE: dict[str, Compute] = {}


def compute(*names: str) -> Callable[[Compute], Compute]:
    def register(fn: Compute) -> Compute:
        for n in names:
            COMPUTE[n] = fn
        return fn

    return register


def _is_float(dtype: str) -> bool:
    return np.dtype(dtype).kind == "f"


# ---------------------------------------------------------------- elementwise
_UNARY = ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "sin", "cos")


def _unary(op: str) -> Compute:
    return lambda ctx: Un(ctx.out.dtype, op, ctx.arg(0))


for _name in _UNARY:
    COMPUTE[_name] = _unary(_name)


@compute("device_copy")  # a copy between two arenas: each element read and written once
def _device_copy(ctx: Ctx) -> LExpr:
    return ctx.arg(0)


@compute("negative")
def _negative(ctx: Ctx) -> LExpr:
    return Un(ctx.out.dtype, "neg", ctx.arg(0))


@compute("abs")
def _abs(ctx: Ctx) -> LExpr:
    return Un(ctx.out.dtype, "abs", ctx.arg(0))


@compute("sign")
def _sign(ctx: Ctx) -> LExpr:
    return Un(ctx.out.dtype, "sign", ctx.arg(0))


@compute("bitwise_not")
def _bitwise_not(ctx: Ctx) -> LExpr:
    return Un(ctx.out.dtype, "not", ctx.arg(0))


@compute("logical_not")
def _not(ctx: Ctx) -> LExpr:
    return Un("bool", "not", ctx.arg(0))


@compute("rsqrt")
def _rsqrt(ctx: Ctx) -> LExpr:
    return Bin(ctx.out.dtype, "div", ctx.c(1), Un(ctx.out.dtype, "sqrt", ctx.arg(0)))


@compute("relu")
def _relu(ctx: Ctx) -> LExpr:
    """numpy's maximum(x, 0): +0.0 for -0.0 (not x < 0 ? 0 : x), NaN stays NaN."""
    x = ctx.arg(0)
    return Select(ctx.out.dtype, Bin("bool", "le", x, ctx.c(0)), ctx.c(0), x)


def numpy_extremum(op: str, t: str, a: LExpr, b: LExpr) -> LExpr:
    """numpy's maximum/minimum: a NaN in either wins, and of two equal values (-0.0 and
    +0.0) the second (LLVM's maximum/minimum order the zeros instead)."""
    if not _is_float(t):
        return Bin(t, op, a, b)
    wins = Bin("bool", "gt" if op == "max" else "lt", a, b)
    return Select(t, Bin("bool", "or", wins, Bin("bool", "ne", a, a)), a, b)


compute("maximum")(lambda ctx: numpy_extremum("max", ctx.out.dtype, ctx.arg(0), ctx.arg(1)))
compute("minimum")(lambda ctx: numpy_extremum("min", ctx.out.dtype, ctx.arg(0), ctx.arg(1)))


@compute("leaky_relu")
def _leaky_relu(ctx: Ctx) -> LExpr:
    x = ctx.arg(0)
    scaled = Bin(ctx.out.dtype, "mul", x, ctx.c(float(ctx.attrs["alpha"])))
    return Select(ctx.out.dtype, Bin("bool", "gt", x, ctx.c(0)), x, scaled)  # x > 0 ? x : a*x


@compute("gelu")
def _gelu(ctx: Ctx) -> LExpr:
    t = ctx.out.dtype
    x = ctx.arg(0)
    if ctx.attrs["approximate"] == "tanh":
        cube = Bin(t, "mul", Bin(t, "mul", x, x), x)
        inner = Bin(t, "add", x, Bin(t, "mul", ctx.c(0.044715), cube))
        core = Un(t, "tanh", Bin(t, "mul", ctx.c(math.sqrt(2 / math.pi)), inner))
    else:
        core = Un(t, "erf", Bin(t, "mul", x, ctx.c(1 / math.sqrt(2))))
    return Bin(t, "mul", Bin(t, "mul", ctx.c(0.5), x), Bin(t, "add", ctx.c(1), core))


@compute("clip")
def _clip(ctx: Ctx) -> LExpr:
    """numpy's clip: x < a_min gives a_min, then above a_max a_max (a tie keeps x, so -0.0
    stays), a NaN bound makes every element NaN; on integers the bounds by the cast rule
    (clip_bounds), a NaN bound giving 0."""
    t, x = ctx.out.dtype, ctx.arg(0)
    if not _is_float(t):
        bounds = clip_bounds(float(ctx.attrs["a_min"]), float(ctx.attrs["a_max"]), t)
        if bounds is None:
            return ctx.c(0)
        above = Bin(t, "max", x, ctx.c(bounds[0].item()))
        return Bin(t, "min", above, ctx.c(bounds[1].item()))
    lo, hi = float(ctx.attrs["a_min"]), float(ctx.attrs["a_max"])
    if math.isnan(lo) or math.isnan(hi):
        return ctx.c(math.nan)
    low = Select(t, Bin("bool", "lt", x, ctx.c(lo)), ctx.c(lo), x)
    return Select(t, Bin("bool", "gt", low, ctx.c(hi)), ctx.c(hi), low)


@compute("cast")
def _cast(ctx: Ctx) -> LExpr:
    return Cast(ctx.out.dtype, ctx.arg(0))


@compute("zeros", "zeros_like")
def _zeros(ctx: Ctx) -> LExpr:
    return ctx.c(0)


@compute("ones", "ones_like")
def _ones(ctx: Ctx) -> LExpr:
    return ctx.c(1)


@compute("full", "full_like")
def _full(ctx: Ctx) -> LExpr:
    value = fill_element(float(ctx.attrs["fill_value"]), ctx.out.dtype)
    return ctx.c(value.item())


@compute("arange")
def _arange(ctx: Ctx) -> LExpr:
    """start + i * step, in int64, then in the output's dtype (numpy's arange for
    integer bounds; a specialised program has numbers for its bounds)."""
    position = ctx.index.flat() * int(ctx.attrs["step"]) + idx(ctx.attrs["start"])
    return position if ctx.out.dtype == INDEX else Cast(ctx.out.dtype, position)


@compute("dim_values")
def _dim_values(ctx: Ctx) -> LExpr:
    """A few sizes as a tensor (ONNX Shape of a symbolic tensor): element i is the i-th
    value, a number or a size read when the kernel runs."""
    values = [idx(v) for v in ctx.attrs["values"]]
    flat = ctx.index.flat()
    value = values[-1]
    for i in reversed(range(len(values) - 1)):
        value = Select(INDEX, Bin("bool", "eq", flat, idx(i)), values[i], value)
    return value if ctx.out.dtype == INDEX else Cast(ctx.out.dtype, value)


# ---------------------------------------------------------------- binary
_BINARY = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "power": "pow",
    "logical_and": "and", "logical_or": "or",
    "fmod": "rem", "bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor",
}  # fmt: skip
_COMPARE = {
    "equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
    "greater_equal": "ge",
}  # fmt: skip


@compute("mod")
def _mod(ctx: Ctx) -> LExpr:
    """Floor modulo from the truncated remainder: add the divisor where the signs differ."""
    t = ctx.out.dtype
    x, y = ctx.arg(0), ctx.arg(1)
    r = Bin(t, "rem", x, y)
    zero = ctx.c(0.0 if _is_float(t) else 0)
    differ = Bin("bool", "ne", Bin("bool", "lt", r, zero), Bin("bool", "lt", y, zero))
    fix = Bin("bool", "and", Bin("bool", "ne", r, zero), differ)
    return Select(t, fix, Bin(t, "add", r, y), r)


def _binary(op: str) -> Compute:
    return lambda ctx: Bin(ctx.out.dtype, op, ctx.arg(0), ctx.arg(1))


for _name, _op in (_BINARY | _COMPARE).items():
    COMPUTE[_name] = _binary(_op)


@compute("power")
def _power(ctx: Ctx) -> LExpr:
    """float32 x to a constant 2, 3 or 4 as multiplies (a vector pow is a libm call per
    lane: GPT-2's GELU cube cost 1.5 ms a layer): x * x is numpy's own square; the cube and
    fourth power are exact float64 squares times x (or squared), rounded once to float32,
    within half an ulp of the true power (libm's powf allows more) but for a second
    rounding in float64 (about one value in 2^29 lies so near a midpoint)."""
    t = ctx.out.dtype
    x, y = ctx.arg(0), ctx.arg(1)
    if t != "float32" or not (isinstance(y, Const) and y.value in (2.0, 3.0, 4.0)):
        return Bin(t, "pow", x, y)
    if y.value == 2.0:
        return Bin(t, "mul", x, x)
    wide = Cast("float64", x)
    square = Bin("float64", "mul", wide, wide)
    power = Bin("float64", "mul", square, wide if y.value == 3.0 else square)
    return Cast(t, power)


@compute("where")
def _where(ctx: Ctx) -> LExpr:
    return Select(ctx.out.dtype, ctx.arg(0), ctx.arg(1), ctx.arg(2))


@compute("bias_add")
def _bias_add(ctx: Ctx) -> LExpr:
    axis = ctx.attrs["axis"] % len(ctx.out.shape)
    b = ctx.readers[1](Index(ctx.in_types[1].shape, multi=[ctx.index.multi()[axis]]))
    return Bin(ctx.out.dtype, "add", ctx.arg(0), b)


# ---------------------------------------------------------------- injective
@compute("reshape", "flatten", "squeeze", "expand_dims")
def _reshape(ctx: Ctx) -> LExpr:
    """Axes group where the two shapes agree on their products (a head split (197, 192) ->
    (197, 3, 64): groups 197 | 192 = 3 x 64): an input axis that splits into output axes
    is an affine sum of their indices, only output axes merged into one need a division,
    and that inside their group. A whole flat offset made every element of a transposed
    head split divide by 192 (ViT's q/k/v copies at 4.5 GB/s)."""
    in_shape, out_shape = ctx.in_types[0].shape, ctx.out.shape
    try:
        groups = axis_groups(in_shape, out_shape) if ctx.index.has_multi() else None
    except ShapeDecisionError:  # symbolic sizes that no order settles: the flat offset
        groups = None
    if groups is None or 0 in in_shape:
        return ctx.readers[0](Index(in_shape, flat=ctx.index.flat()))
    out = ctx.index.multi()
    multi: list[LExpr] = []
    for in_axes, out_axes in groups:
        if not in_axes:  # axes of extent 1 around a 0-d input: no input index to compute
            continue
        within = Index(tuple(out_shape[k] for k in out_axes), multi=[out[k] for k in out_axes])
        dims = tuple(in_shape[k] for k in in_axes)
        multi += Index(dims, flat=within.flat()).multi() if len(dims) > 1 else [within.flat()]
    return ctx.readers[0](Index(in_shape, multi=multi))


def axis_groups(
    a: tuple[int, ...], b: tuple[int, ...]
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Consecutive axes of a and b with equal products, in order (shapes of one size);
    axes of extent 1 left over at either end join the last group (or make one)."""
    groups: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ga, gb = [i], [j]
        pa, pb = a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                ga.append(i)
                pa *= a[i]
                i += 1
            else:
                gb.append(j)
                pb *= b[j]
                j += 1
        groups.append((tuple(ga), tuple(gb)))
    rest_a, rest_b = tuple(range(i, len(a))), tuple(range(j, len(b)))
    if rest_a or rest_b:
        if groups:
            ga_, gb_ = groups.pop()
            groups.append((ga_ + rest_a, gb_ + rest_b))
        else:
            groups.append((rest_a, rest_b))
    return groups


@compute("broadcast_to")
def _broadcast_to(ctx: Ctx) -> LExpr:
    return ctx.arg(0)


@compute("transpose")
def _transpose(ctx: Ctx) -> LExpr:
    in_shape = ctx.in_types[0].shape
    axes = ctx.attrs["axes"] or tuple(reversed(range(len(in_shape))))
    out = ctx.index.multi()
    multi: list[LExpr] = [idx(0)] * len(in_shape)
    for k, a in enumerate(axes):
        multi[a] = out[k]
    return ctx.readers[0](Index(in_shape, multi=multi))


@compute("layout_transform")
def _layout_transform(ctx: Ctx) -> LExpr:
    """Output axes -> primal indices (outer * factor + inner) -> input axes."""
    src, dst = parse_layout(ctx.attrs["src_layout"]), parse_layout(ctx.attrs["dst_layout"])
    position = {letter: k for k, (letter, _) in enumerate(dst)}
    out = ctx.index.multi()
    primal: dict[str, LExpr] = {}
    for letter, factor in dst:
        if not factor:
            whole = out[position[letter]]
            split = split_factor(dst, letter)
            primal[letter] = whole if split == 1 else whole * split + out[position[letter.lower()]]
    multi: list[LExpr] = []
    for letter, factor in src:
        if factor:
            multi.append(primal[letter.upper()] % factor)
            continue
        split = split_factor(src, letter)
        multi.append(primal[letter] if split == 1 else primal[letter] // split)
    return ctx.readers[0](Index(ctx.in_types[0].shape, multi=multi))


@compute("strided_slice")
def _strided_slice(ctx: Ctx) -> LExpr:
    in_shape = ctx.in_types[0].shape
    a = ctx.attrs
    spec = slice_spec(in_shape, a["begin"], a["end"], a["strides"], a["axes"])
    multi = []
    start: int | Dim
    for s, i, dim in zip(spec, ctx.index.multi(), in_shape, strict=True):
        if all(isinstance(v, int) or v is None for v in (s.start, s.stop, s.step, dim)):
            start, _, step = s.indices(dim)
        else:  # sizes in the bounds or the axis: a step of 1 (type inference says so)
            start, step = symbolic_bounds(s, dim)[0], 1
        multi.append(i * step + start)
    return ctx.readers[0](Index(in_shape, multi=multi))


@compute("concatenate")
def _concatenate(ctx: Ctx) -> LExpr:
    axis = ctx.attrs["axis"] % len(ctx.out.shape)
    out = ctx.index.multi()
    result: LExpr | None = None
    offset = 0
    pieces = []
    for reader, t in zip(ctx.readers, ctx.in_types, strict=True):
        local = out[axis] - offset if offset else out[axis]
        clamped = clamp(local, 0, t.shape[axis] - 1)  # loads stay in bounds under select
        multi = [*out[:axis], clamped, *out[axis + 1 :]]
        pieces.append((offset + t.shape[axis], reader(Index(t.shape, multi=multi))))
        offset += t.shape[axis]
    for end, value in reversed(pieces):
        result = (
            value
            if result is None
            else Select(ctx.out.dtype, Bin("bool", "lt", out[axis], idx(end)), value, result)
        )
    assert result is not None
    return result


@compute("pad")
def _pad(ctx: Ctx) -> LExpr:
    if ctx.attrs["pad_mode"] != "constant":
        raise NotImplementedError("pad modes other than constant")
    in_shape = ctx.in_types[0].shape
    inside: LExpr | None = None
    multi = []
    for (before, _), i, dim in zip(
        ctx.attrs["pad_width"], ctx.index.multi(), in_shape, strict=True
    ):
        local = i - before if before else i
        ok = Bin(
            "bool", "and", Bin("bool", "ge", local, idx(0)), Bin("bool", "lt", local, idx(dim))
        )
        inside = ok if inside is None else Bin("bool", "and", inside, ok)
        multi.append(clamp(local, 0, dim - 1))
    value = ctx.readers[0](Index(in_shape, multi=multi))
    pad = float(ctx.attrs["pad_value"])
    fill = ctx.c(pad if _is_float(ctx.out.dtype) else int(pad))
    return value if inside is None else Select(ctx.out.dtype, inside, value, fill)
