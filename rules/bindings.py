"""Random bindings for a rule's pattern variables that type-check and satisfy its guards.

Used by the soundness checker. Rather than drawing shapes blindly and filtering, the
generator builds the left-hand side bottom-up: each tensor variable gets a shape proposed from
the shapes already known around it (the same shape, broadcast variants, one of its dimensions,
a weight that fits a dense/matmul/conv2d), every attribute — named by a variable or left as a
wildcard — gets a value that fits its op and input types, and guards that pin a shape, rank,
dtype or attribute (`shape(?k) == [dim(?w, 0), 1, 1]`) are applied as the variable is made.
A structure that still fails inference or a guard is retried with the next random choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from egraph_ir import op as ops
from egraph_ir.device import VirtualDevice
from egraph_ir.egraph import Match
from egraph_ir.egraph.pattern import AttrVar, Pattern, PCall, PGet, PLit, PVar, resolve_attr
from egraph_ir.errors import CompilerError
from egraph_ir.expr import Constant, Expr, TupleGetItem
from egraph_ir.infer import infer_type
from egraph_ir.op.layout import parse_layout
from egraph_ir.registry import OpPattern, get_op
from egraph_ir.types import TensorType, Type

from .guards import IDENTITY, GuardExpr
from .rule import Rule

DTYPES = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8", "bool")
DIMS = (1, 2, 3, 4)
RANK_WEIGHTS = (0.1, 0.2, 0.25, 0.2, 0.25)  # ranks 0..4


@dataclass
class Structure:
    """Shapes, dtypes and attributes of one binding; values come later."""

    dtype: str
    types: dict[str, TensorType] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)  # attribute variables' values
    wildcards: dict[tuple[int, str], Any] = field(default_factory=dict)  # unnamed LHS attrs
    literal_dtypes: dict[int, str] = field(default_factory=dict)


class _Retry(Exception):
    """This random choice does not fit; try another."""


class _Builder:
    def __init__(
        self,
        rule: Rule,
        rng: np.random.Generator,
        structure: Structure | None = None,
        values: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.rule, self.rng, self.values = rule, rng, values
        self.hints: dict[tuple[str, str], GuardExpr] = {
            g.target: g for g in rule.guards if g.target is not None
        }
        self.s = structure or Structure(self._dtype())

    # ------------------------------------------------------------ choices
    def _pick(self, options: list[Any], weights: list[float] | None = None) -> Any:
        if weights is not None:
            p = np.asarray(weights, float)
            return options[int(self.rng.choice(len(options), p=p / p.sum()))]
        return options[int(self.rng.integers(len(options)))]

    def _hint(self, what: str, name: str) -> Any:
        guard = self.hints.get((what, name))
        if guard is None or guard.value is None:
            return None
        try:
            return guard.value(Match(self.s.types, self.s.attrs, {}))
        except (KeyError, IndexError, TypeError):
            return None  # depends on something not made yet: leave it to chance

    def _dtype(self) -> str:
        return self._pick(list(DTYPES), [8, 3, 2, 1, 1, 1, 1, 1])

    def _random_shape(self, rank: int | None = None) -> tuple[int, ...]:
        if rank is None:
            rank = int(self.rng.choice(5, p=RANK_WEIGHTS))
        return tuple(int(self._pick(list(DIMS))) for _ in range(rank))

    def _shape_of_rank(
        self, rank: int, siblings: list[TensorType], proposal: tuple[int, ...] | None
    ) -> tuple[int, ...]:
        """A shape of a rank a guard pins: the proposal or one near the siblings when
        they have it (a per-channel (1, C, 1, 1) next to (N, C, H, W)), else random."""
        if proposal is not None and len(proposal) == rank:
            return proposal
        for _ in range(4):
            near = self._shape_near([t.shape for t in siblings]) if siblings else ()
            if len(near) == rank:
                return near
        return self._random_shape(rank)

    def _shape_near(self, known: list[tuple[int, ...]]) -> tuple[int, ...]:
        """A shape likely to fit next to the known sibling shapes."""
        if not known:
            return self._random_shape()
        s = self._pick(known)
        new = int(self._pick(list(DIMS)))
        options: list[tuple[int, ...]] = [s, s[int(self.rng.integers(len(s) + 1)) :]]
        options.append(tuple(1 if self.rng.random() < 0.5 else d for d in s))
        if s:
            options += [(self._pick(list(s)),), (s[-1], new), (new, s[-1])]
            options.append((self._pick(list(s)), *(1,) * int(self.rng.integers(0, 3))))
        if len(s) >= 2:
            options.append((*s[:-2], s[-1], new))
        if len(s) == 4:
            k = int(self.rng.integers(1, 3))
            options.append((new, s[1], k, k))
        options.append(self._random_shape())
        return self._pick(options)

    # ------------------------------------------------------------ variables
    def tensor(
        self, name: str, siblings: list[TensorType], proposal: tuple[int, ...] | None = None
    ) -> Expr:
        s = self.s
        if name not in s.types:
            shape = self._hint("shape", name)
            if shape is None:
                rank = self._hint("rank", name)
                if isinstance(rank, int):
                    shape = self._shape_of_rank(rank, siblings, proposal)
                elif proposal is not None and self.rng.random() < 0.85:
                    shape = proposal
                else:
                    shape = self._shape_near([t.shape for t in siblings])
            dtype = self._hint("dtype", name)
            if not isinstance(dtype, str):
                kinds = self._hint("kind", name)
                if kinds:
                    dtype = self._pick(list(kinds))
                elif self.rng.random() < 0.9:
                    dtype = s.dtype
                else:
                    dtype = self._dtype()
            s.types[name] = TensorType(tuple(int(d) for d in shape), dtype)
        if self.values is not None:
            return Constant(self.values[name])
        t = s.types[name]
        return Constant(np.zeros(t.shape, dtype=t.dtype))  # a typed stand-in

    def _attrs(self, p: PCall, path: int, in_types: list[TensorType]) -> dict[str, Any]:
        """Values for every attribute of a call: fixed, named by a variable, or wildcard."""
        op = get_op(p.op)
        given = p.attr_map()
        ins: list[Type] = list(in_types)
        attrs: dict[str, Any] = {}
        for spec in op.attrs:
            value = given.get(spec.name)
            if isinstance(value, AttrVar):
                if value.name not in self.s.attrs:
                    hinted = self._hint("attr", value.name)
                    if hinted is IDENTITY and in_types:
                        hinted = tuple(range(in_types[0].ndim))
                    self.s.attrs[value.name] = (
                        hinted
                        if hinted is not None
                        else attr_value(self, op.name, spec.name, spec.kind, spec.default, ins)
                    )
                attrs[spec.name] = self.s.attrs[value.name]
            elif spec.name in given:
                attrs[spec.name] = value
            else:  # not written on the left: the rule matches any value
                key = (path, f"{op.name}.{spec.name}")
                if key not in self.s.wildcards:
                    self.s.wildcards[key] = attr_value(
                        self, op.name, spec.name, spec.kind, spec.default, ins
                    )
                attrs[spec.name] = self.s.wildcards[key]
        return attrs

    # ------------------------------------------------------------ patterns
    def build(self, p: Pattern, path: int = 0) -> Expr:
        """The pattern as IR over placeholders; raises _Retry when it does not type-check."""
        if isinstance(p, PVar):
            return self.tensor(p.name, [])
        if isinstance(p, PLit):
            dtype = self.s.literal_dtypes.get(id(p), self.s.dtype)
            with np.errstate(all="ignore"):
                value = np.asarray(p.value).astype(dtype)
            if value != p.value:
                raise _Retry(f"{p.value} is not a {dtype}")  # no such constant can match
            return Constant(value)
        if isinstance(p, PGet):
            inner = self.build(p.tuple_value, path * 4 + 1)
            return TupleGetItem(inner, p.index)
        assert isinstance(p, PCall)
        op = get_op(p.op)
        args: list[Expr | None] = [None] * len(p.args)
        known: list[TensorType] = []
        attrs: dict[str, Any] | None = None
        for i in _build_order(p, op.pattern):
            a = p.args[i]
            if i == 1:
                attrs = self._attrs(p, path, known)  # once the data input's type is known
            if i and known:
                proposal = _propose(op.name, i, known[0], attrs or {}, self)
            else:
                proposal = _propose_data(p, self) if i == 0 else None
            if isinstance(a, PVar):
                arg = self.tensor(a.name, known, proposal)
            elif isinstance(a, PLit):
                self.s.literal_dtypes[id(a)] = known[0].dtype if known else self.s.dtype
                arg = self.build(a)
            else:
                arg = self.build(a, path * 8 + i + 2)
            args[i] = arg
            t = _type_of(arg)
            if isinstance(t, TensorType):
                known.append(t)
        if attrs is None:
            attrs = self._attrs(p, path, known)
        try:
            call = ops.call(op.name, *args, **attrs)
            infer_type(call)
        except (CompilerError, ValueError, TypeError, IndexError) as exc:
            raise _Retry(str(exc)) from None
        # read normalised attribute values back, as the e-graph sees them
        for name, value in p.attrs:
            if isinstance(value, AttrVar):
                self.s.attrs[value.name] = call.attrs[name]
        return call


def _build_order(p: PCall, pattern: OpPattern) -> list[int]:
    """Arguments in order, except that an elementwise or broadcasting op (add, multiply)
    builds its call arguments before its variables: `add(?y, f(?x))` then draws ?y next to
    what f(?x) made (a shape its guards can hold), not blindly first."""
    order = list(range(len(p.args)))
    elementwise = pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST)
    if not elementwise or not any(isinstance(a, PCall) for a in p.args):
        return order
    return sorted(order, key=lambda i: not isinstance(p.args[i], PCall))


def _type_of(e: Expr) -> Type:
    if isinstance(e, Constant):
        return TensorType(e.data.shape, str(e.data.dtype))
    return infer_type(e).checked_type


def draw_structure(
    rule: Rule, lhs: Pattern, rng: np.random.Generator, tries: int = 200, dtype: str | None = None
) -> Structure | None:
    """A structure under which the pattern type-checks and all type-level guards hold;
    `dtype` fixes the binding's main dtype (the fuzzer steers programs with it)."""
    for _ in range(tries):
        b = _Builder(rule, rng, Structure(dtype) if dtype else None)
        try:
            b.build(lhs)
        except _Retry:
            continue
        match = Match(b.s.types, b.s.attrs, dict.fromkeys(b.s.types))
        try:
            ok = all(g(match) for g in rule.guards if not g.reads_values)
        except (KeyError, IndexError, TypeError, ValueError):
            ok = False
        if ok:
            return b.s
    return None


# ---------------------------------------------------------------- argument shapes
CHANNEL_VECTOR_OPS = ("batch_norm", "bias_add", "layer_norm", "instance_norm", "group_norm")


def _propose(
    op: str, index: int, x: TensorType, attrs: dict[str, Any], b: _Builder
) -> tuple[int, ...] | None:
    """The shape an op's type relation wants for argument `index` next to data `x`."""
    new = int(b._pick(list(DIMS)))
    if op in CHANNEL_VECTOR_OPS and x.ndim:
        axis = attrs.get("axis", 1)
        return (x.shape[axis],) if isinstance(axis, int) and -x.ndim <= axis < x.ndim else None
    if op == "dense" and x.ndim:
        return (new, x.shape[-1])
    if op == "matmul" and x.ndim:
        return (x.shape[-1], new)
    # a multiplier or offset per channel of blocks of 16 (the blocked-layout rules' guards)
    per_channel = op in ("requantize", "multiply", "add") and index == 1 and x.ndim == 4
    if per_channel and x.shape[1] % 16 == 0 and b.rng.random() < 0.5:
        return (x.shape[1], 1, 1)
    if op == "qnn_conv2d" and index > 1:
        return ()  # zero points: one per tensor
    if op in ("conv2d", "qnn_conv2d") and x.ndim == 4:
        groups = attrs.get("groups", 1)
        if not isinstance(groups, int) or groups < 1 or x.shape[1] % groups:
            return None
        k = int(b.rng.integers(1, 4))  # 3x3 now and then (Winograd's rule asks for it)
        if groups == 1 and b.rng.random() < (0.5 if x.shape[1] % 16 == 0 else 0.25):
            new = 16  # output channels in blocks (blocked-layout rules ask for them)
        return (groups * new, x.shape[1] // groups, k, k)
    if op == "conv2d_winograd" and x.ndim == 5:
        return (16 * int(b._pick([1, 2])), x.shape[1] * x.shape[4], 3, 3)
    if op == "conv2d_nchwc" and x.ndim == 5:
        channels, groups = x.shape[1] * x.shape[4], attrs.get("groups", 1)
        if not isinstance(groups, int) or groups < 1 or channels % groups:
            return None
        k = int(b.rng.integers(1, 4))
        per_group = max(1, x.shape[4] // groups) if groups > 1 else x.shape[4]
        return (groups * per_group, channels // groups, k, k)
    return None


def _propose_data(p: PCall, b: _Builder) -> tuple[int, ...] | None:
    """A shape for an op's data input where its attributes fix part of it: a layout
    string's axes ('NCHW16c': a last axis of 16), or channels in blocks of 16 for a
    convolution now and then, its map even half of those times (the guards of
    blocked-layout and kernel rules ask for them)."""
    given = p.attr_map()
    if p.op in ("layout_transform", "conv2d_nchwc", "conv2d_winograd"):
        default = None if p.op == "layout_transform" else "NCHW16c"
        layout = given.get("src_layout" if p.op == "layout_transform" else "data_layout", default)
        if isinstance(layout, str):
            try:
                axes = parse_layout(layout)
            except CompilerError:
                return None
            return tuple(f if f else int(b._pick(list(DIMS))) for _, f in axes)
        if p.op == "layout_transform":  # either side of NCHW <-> NCHW16c
            n, h, w = b._random_shape(3)
            return b._pick(
                [(n, 16 * int(b._pick([1, 2])), h, w), (n, int(b._pick(list(DIMS))), h, w, 16)]
            )
    if p.op in ("conv2d", "qnn_conv2d") and b.rng.random() < 0.5:
        h, w = b._random_shape(2)
        if b.rng.random() < 0.5:  # an even map (Winograd's 2x2 tiles)
            h, w = h + h % 2, w + w % 2
        channels = [16, 32] if p.op == "conv2d" else [3, 16, 32]  # an int8 RGB stem too
        return (int(b._pick([1, 2])), int(b._pick(channels)), h, w)
    return None


# ---------------------------------------------------------------- attribute values
CHOICES: dict[str, list[Any]] = {  # attributes whose value is one of a few, by name
    "num_newaxis": [0, 1, 2],
    "compiler": ["default", "blas", "onnxruntime"],  # annotations: any target name
    "epsilon": [1e-5, 1e-3, 0.1],
    "eps": [1e-5, 1e-3, 0.1],
    "rate": [0.0, 0.25, 0.5],
    "alpha": [0.01, 0.2, 1.5],
    "fill_value": [0.0, 1.0, -2.5],
    "pad_value": [0.0, 1.0, -2.5],
    "a_min": [-1.0, 0.0, -6.0],
    "a_max": [1.0, 6.0, 0.5],
    "strides": [(1, 1), (1, 1), (2, 2), (1, 2)],
    "dilation": [(1, 1), (1, 1), (2, 2), (1, 2)],
    "approximate": ["none", "tanh"],
}


def attr_value(b: _Builder, op: str, name: str, kind: str, default: Any, ins: list[Type]) -> Any:
    """A value for one attribute that is likely valid for its op and input types."""
    first = ins[0] if ins and isinstance(ins[0], TensorType) else TensorType((), "float32")
    r, shape, pick = first.ndim, first.shape, b._pick
    if op == "transpose" and name == "axes":
        perms = [tuple(range(r)), tuple(reversed(range(r)))]
        perms += [tuple(b.rng.permutation(r).tolist()) for _ in range(2)]
        perms += [_inverse(v) for v in b.s.attrs.values() if isinstance(v, tuple) and len(v) == r]
        return pick(perms) if r else ()
    if op == "reshape" and name == "newshape":
        size = int(np.prod(shape, dtype=np.int64))
        options = [shape, (size,), (1, *shape), (-1,)]
        if r >= 2:
            options.append((*shape[:-2], shape[-2] * shape[-1]))
        return pick(options)
    if op == "broadcast_to" and name == "shape":
        return pick([shape, (2, *shape), tuple(3 if d == 1 else d for d in shape)])
    if name == "axis" and kind == "int":
        extra = 1 if op == "expand_dims" else 0
        return int(b.rng.integers(-r - extra, r + extra)) if r + extra else 0
    if name == "axis" and kind in ("axes", "int?"):
        if r == 0 or b.rng.random() < 0.3:
            return None
        if kind == "int?":
            return int(b.rng.integers(-r, r))
        axes = sorted(set(b.rng.choice(r, size=int(b.rng.integers(1, r + 1))).tolist()))
        return tuple(int(a) for a in axes)
    if name in CHOICES:
        return pick(CHOICES[name])
    if kind == "device":  # the host's devices: all of them run here
        return pick([VirtualDevice("cpu", 0), VirtualDevice("cpu", 1)])
    if kind == "bool":
        return bool(b.rng.random() < 0.5) if default is not True else bool(b.rng.random() < 0.8)
    if kind == "dtype":
        return pick(list(DTYPES))
    return _shaped_attr_value(b, op, name, default, shape)


def _shaped_attr_value(
    b: _Builder, op: str, name: str, default: Any, shape: tuple[int, ...]
) -> Any:
    """Attribute values that depend on the input's shape or on randomness beyond a pick."""
    r, pick = len(shape), b._pick
    if name == "padding":
        return tuple(int(v) for v in b.rng.integers(0, 2, size=4))
    if op == "layout_transform":  # NCHW <-> NCHW16c, as the data's rank says
        return {("src_layout", 4): "NCHW", ("src_layout", 5): "NCHW16c"}.get(
            (name, r), "NCHW16c" if r == 4 else "NCHW"
        )
    if name == "pool_size":
        return (int(b.rng.integers(1, 3)), int(b.rng.integers(1, 3)))
    if name in ("groups", "num_groups"):
        channels = shape[1] if r >= 2 else 1
        if op == "conv2d_nchwc" and r == 5:
            channels *= shape[4]
        return pick([1, 1, channels])
    if name == "indices_or_sections":
        return pick([1, 2, (1,)])
    if name == "units":
        return None
    if op == "strided_slice" and name in ("begin", "end"):
        if name == "begin":
            return tuple(int(b.rng.integers(-d, d)) if d else 0 for d in shape)
        return tuple(int(b.rng.integers(-d, d + 2)) if d else 0 for d in shape)
    if op == "strided_slice" and name == "strides":
        return pick([None, tuple(int(b.rng.choice([1, 2, -1])) for _ in shape)])
    if op == "strided_slice" and name == "axes":
        return None
    if name == "pad_width":
        return tuple((int(b.rng.integers(0, 2)), int(b.rng.integers(0, 3))) for _ in shape)
    if default is not None and not _is_required(default):
        return default
    raise _Retry(f"no generator for {op}.{name}")


def _is_required(default: Any) -> bool:
    return type(default) is object


def _inverse(p: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(p)
    for i, a in enumerate(p):
        inv[a] = i
    return tuple(inv)


def build_lhs(rule: Rule, lhs: Pattern, s: Structure, values: dict[str, np.ndarray]) -> Expr:
    """The left-hand side over the bound values, with the structure's attributes."""
    return _Builder(rule, np.random.default_rng(0), s, values).build(lhs)


def instantiate(p: Pattern, consts: dict[str, Constant], attrs: dict[str, Any], root: Type) -> Expr:
    """A side of a rule over constant bindings, as the e-graph builds a right-hand side
    (literals take the result's dtype; an attribute variable used as a value is a scalar;
    computed attributes are resolved): the soundness checker's and the prover's."""
    dtype = root.dtype if isinstance(root, TensorType) else "float32"
    if isinstance(p, PVar):
        if p.name in consts:
            return consts[p.name]
        return Constant(np.asarray(float(attrs[p.name]), dtype=dtype))  # an attribute as scalar
    if isinstance(p, PLit):
        return Constant(np.asarray(p.value, dtype=dtype))
    if isinstance(p, PGet):
        return TupleGetItem(instantiate(p.tuple_value, consts, attrs, root), p.index)
    assert isinstance(p, PCall)
    args = [instantiate(a, consts, attrs, root) for a in p.args]
    given = {k: resolve_attr(v, match_of(consts, attrs)) for k, v in p.attrs}
    return ops.call(p.op, *args, **given)


def match_of(consts: dict[str, Constant], attrs: dict[str, Any]) -> Match:
    """The bindings as a guard sees them (for computed right-hand attributes)."""
    types = {n: TensorType(c.data.shape, str(c.data.dtype)) for n, c in consts.items()}
    return Match(types, attrs, {n: c.data for n, c in consts.items()})
