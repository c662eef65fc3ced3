"""The encodings of ops that move or combine elements (rules/shape_proofs/encoder.py has the
encoder they plug into): each takes the encoder, the call and its argument tensors and
returns the result tensor, adding its typing conditions to the encoder."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from egraph_ir.egraph.pattern import PCall, PVar
from egraph_ir.op.layout import parse_layout, split_factor
from egraph_ir.registry import ShapeError

from ..smt import OutsideFragment
from .encoder import IllTyped, Tensor, TensorEncoder, as_tuple, axis_of, product
from .guards import SymInt


# ------------------------------------------------------------ data movement
def transpose(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    rank = len(x.shape)
    axes = enc.attr(p, "axes")
    perm = list(range(rank))[::-1] if axes is None else [axis_of(a, rank) for a in axes]
    if sorted(perm) != list(range(rank)):
        raise IllTyped
    shape = [x.shape[a] for a in perm]

    def at(i: list[Any]) -> Any:
        source = [None] * rank
        for k, a in enumerate(perm):
            source[a] = i[k]
        return x.at(source)

    return Tensor(shape, at, x.dtype)


def reshape(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    z3 = enc.z3
    newshape = list(enc.attr(p, "newshape"))
    if sum(1 for d in newshape if isinstance(d, int) and d == -1) > 1:
        raise IllTyped
    known = [SymInt.lift(z3, d) for d in newshape if not (isinstance(d, int) and d == -1)]
    if any(isinstance(d, int) and d < -1 for d in newshape):
        raise IllTyped
    shape = []
    for d in newshape:
        if isinstance(d, int) and d == -1:
            shape.append(_inferred(enc, known, x.shape))
        else:
            shape.append(SymInt.lift(z3, d))
    return enc.regroup(x, shape)


def _inferred(enc: TensorEncoder, known: list[Any], dims: list[Any]) -> Any:
    """A reshape's -1: the input's size over the other entries' product. Where those are
    among the input's dims (reshape to [dim(?x, 0), -1]) the quotient is the product of
    the rest, which z3 need not find by nonlinear division; else a division, typed exact.
    A term, not an unknown: the right side's -1 cannot be "wrong"."""
    z3 = enc.z3
    rest = _factors(z3, dims)
    constant = 1
    for f in _factors(z3, known):
        if z3.is_int_value(f):
            constant *= f.as_long()
            continue
        same = next((k for k, g in enumerate(rest) if z3.eq(f, g)), None)
        if same is None:
            break
        rest.pop(same)
    else:
        numbers = [g.as_long() for g in rest if z3.is_int_value(g)]
        value = math.prod(numbers)
        if constant and value % constant == 0:
            others = [g for g in rest if not z3.is_int_value(g)]
            return z3.simplify(product(z3, [z3.IntVal(value // constant), *others]))
    size, total = product(z3, known), product(z3, dims)
    enc.typing += [size != 0, total % size == 0]
    return z3.simplify(total / size)


def _factors(z3: Any, terms: list[Any]) -> list[Any]:
    """The factors of a product of terms (nested multiplications opened)."""
    out, stack = [], list(terms)
    while stack:
        t = z3.simplify(stack.pop())
        if z3.is_mul(t):
            stack.extend(t.children())
        else:
            out.append(t)
    return out


def flatten(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    axis = enc.attr(p, "axis")
    axis = axis + len(x.shape) if axis < 0 else axis
    if not 0 <= axis <= len(x.shape):
        raise IllTyped
    shape = [product(enc.z3, x.shape[:axis]), product(enc.z3, x.shape[axis:])]
    return enc.regroup(x, [enc.z3.simplify(d) for d in shape])


def expand_dims(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    axis, count = enc.attr(p, "axis"), enc.attr(p, "num_newaxis")
    rank = len(x.shape)
    axis = axis + rank + 1 if axis < 0 else axis
    if not 0 <= axis <= rank or count < 0:
        raise IllTyped
    shape = x.shape[:axis] + [enc.z3.IntVal(1)] * count + x.shape[axis:]
    return Tensor(shape, lambda i: x.at(i[:axis] + i[axis + count :]), x.dtype)


def squeeze(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    axes = enc.attr(p, "axis")
    rank = len(x.shape)
    if axes is None:
        raise OutsideFragment("squeeze without axes (which dims are 1 depends on the sizes)")
    axes = sorted({axis_of(a, rank) for a in axes})
    if any(not 0 <= a < rank for a in axes):
        raise IllTyped
    enc.typing += [x.shape[a] == 1 for a in axes]
    kept = [k for k in range(rank) if k not in axes]

    def at(i: list[Any]) -> Any:
        source = [enc.z3.IntVal(0)] * rank
        for k, j in zip(kept, i, strict=True):
            source[k] = j
        return x.at(source)

    return Tensor([x.shape[k] for k in kept], at, x.dtype)


def broadcast_to(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    target = [SymInt.lift(enc.z3, d) for d in enc.attr(p, "shape")]
    if len(target) < len(x.shape):
        raise IllTyped
    for d, t in zip(x.shape, target[len(target) - len(x.shape) :], strict=True):
        enc.typing.append(enc.z3.Or(d == t, d == 1))
    return Tensor(target, lambda i: x.at(enc.broadcast_index(x.shape, i)), x.dtype)


def concatenate(enc: TensorEncoder, p: PCall, *parts: Tensor) -> Tensor:
    z3 = enc.z3
    rank = len(parts[0].shape)
    if any(len(t.shape) != rank for t in parts) or rank == 0:
        raise IllTyped
    axis = axis_of(enc.attr(p, "axis"), rank)
    for t in parts[1:]:
        enc.typing += [t.shape[k] == parts[0].shape[k] for k in range(rank) if k != axis]
    starts = [z3.IntVal(0)]
    for t in parts:
        starts.append(starts[-1] + t.shape[axis])
    shape = list(parts[0].shape)
    shape[axis] = z3.simplify(starts[-1])

    def at(i: list[Any]) -> Any:
        value = None
        for t, start in reversed(list(zip(parts, starts, strict=False))):
            here = t.at(i[:axis] + [i[axis] - start] + i[axis + 1 :])
            value = here if value is None else z3.If(i[axis] >= start, here, value)
        return value

    return Tensor(shape, at, parts[0].dtype)


def layout_transform(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    z3 = enc.z3
    try:
        src, dst = (
            parse_layout(enc.attr(p, "src_layout")),
            parse_layout(enc.attr(p, "dst_layout")),
        )
    except ShapeError:
        raise IllTyped from None
    if len(src) != len(x.shape) or sorted(u for u, f in src if not f) != sorted(
        u for u, f in dst if not f
    ):
        raise IllTyped
    extent = {}
    for (letter, factor), d in zip(src, x.shape, strict=True):
        if factor:
            enc.typing.append(d == factor)
        else:
            extent[letter] = d * split_factor(src, letter)
    shape = []
    for letter, factor in dst:
        if factor:
            shape.append(z3.IntVal(factor))
        else:
            f = split_factor(dst, letter)
            enc.typing.append(extent[letter] % f == 0)
            shape.append(z3.simplify(extent[letter] / f))

    def at(i: list[Any]) -> Any:
        where = {letter: j for (letter, _), j in zip(dst, i, strict=True)}
        logical = {
            u: where[u] * split_factor(dst, u) + where.get(u.lower(), 0) for u, f in dst if not f
        }
        source = []
        for letter, factor in src:
            u = letter.upper()
            fs = split_factor(src, u)
            source.append(logical[u] % factor if factor else logical[u] / fs)
        return x.at(source)

    return Tensor(shape, at, x.dtype)


# ------------------------------------------------------------ arithmetic over axes
def bias_add(enc: TensorEncoder, p: PCall, x: Tensor, b: Tensor) -> Tensor:
    rank = len(x.shape)
    axis = enc.attr(p, "axis")
    axis = axis + rank if axis < 0 else axis
    if len(b.shape) != 1 or not 0 <= axis < rank:
        raise IllTyped
    enc.typing.append(b.shape[0] == x.shape[axis])
    add = PCall("add", (PVar("x"), PVar("b")))
    return Tensor(
        x.shape,
        lambda i: enc.scalar.op(add, [(x.at(i), x.dtype), (b.at([i[axis]]), b.dtype)])[0],
        x.dtype,
    )


def reduce(enc: TensorEncoder, p: PCall, x: Tensor) -> Tensor:
    z3, rank = enc.z3, len(x.shape)
    axis = enc.attr(p, "axis")
    keep = bool(enc.attr(p, "keepdims"))
    axes = list(range(rank)) if axis is None else [axis_of(a, rank) for a in as_tuple(axis)]
    kept = [k for k in range(rank) if k not in axes]
    shape = [
        z3.IntVal(1) if k in axes else x.shape[k] for k in range(rank) if keep or k not in axes
    ]
    name = f"{p.op}[{len(axes)}]{x.dtype}"
    enc.scalar.opaque.add(p.op)
    reduced = [z3.FreshInt("r") for _ in axes]
    sort = z3.ArraySort(*([z3.IntSort()] * len(axes)), enc.scalar.sort(x.dtype)) if axes else None

    def at(i: list[Any]) -> Any:
        outer = [i[k] for k in range(rank) if k not in axes] if keep else list(i)
        source: list[Any] = [None] * rank
        for k, j in zip(kept, outer, strict=True):
            source[k] = j
        for k, r in zip(axes, reduced, strict=True):
            source[k] = r
        if not axes:
            return x.at(source)
        body = z3.Lambda(reduced, x.at(source))
        fn = z3.Function(name, sort, *([z3.IntSort()] * len(axes)), enc.scalar.sort(x.dtype))
        return fn(body, *[x.shape[k] for k in axes])

    return Tensor(shape, at, x.dtype)


def dense(enc: TensorEncoder, p: PCall, x: Tensor, w: Tensor) -> Tensor:
    if len(w.shape) != 2 or not x.shape:
        raise IllTyped
    enc.typing.append(x.shape[-1] == w.shape[1])
    return _products(
        enc,
        x,
        w.shape[1],
        [*x.shape[:-1], w.shape[0]],
        lambda i, k: (x.at(i[:-1] + [k]), w.at([i[-1], k])),
    )


def matmul(enc: TensorEncoder, p: PCall, x: Tensor, w: Tensor) -> Tensor:
    if not x.shape or not w.shape:
        raise IllTyped
    if len(w.shape) != 2 or len(x.shape) < 2:
        raise OutsideFragment("matmul other than of a matrix by a 2-D weight")
    enc.typing.append(x.shape[-1] == w.shape[0])
    return _products(
        enc,
        x,
        w.shape[0],
        [*x.shape[:-1], w.shape[1]],
        lambda i, k: (x.at(i[:-1] + [k]), w.at([k, i[-1]])),
    )


def _products(
    enc: TensorEncoder,
    x: Tensor,
    depth: Any,
    shape: list[Any],
    terms: Callable[[list[Any], Any], tuple[Any, Any]],
) -> Tensor:
    z3 = enc.z3
    multiply = PCall("multiply", (PVar("a"), PVar("b")))
    enc.scalar.opaque.add("the sum of a product")
    sort = enc.scalar.sort(x.dtype)
    fn = z3.Function(f"dot[{x.dtype}]", z3.ArraySort(z3.IntSort(), sort), z3.IntSort(), sort)
    k = z3.FreshInt("k")

    def at(i: list[Any]) -> Any:
        a, b = terms(i, k)
        term = enc.scalar.op(multiply, [(a, x.dtype), (b, x.dtype)])[0]
        return fn(z3.Lambda([k], term), depth)

    return Tensor(shape, at, x.dtype)


OPS: dict[str, Callable[..., Tensor]] = {
    "transpose": transpose, "reshape": reshape, "flatten": flatten, "expand_dims": expand_dims,
    "squeeze": squeeze, "broadcast_to": broadcast_to, "concatenate": concatenate,
    "layout_transform": layout_transform, "bias_add": bias_add, "dense": dense,
    "matmul": matmul, **dict.fromkeys(("sum", "mean", "max", "min", "prod"), reduce),
}  # fmt: skip

__all__ = ["OPS"]
