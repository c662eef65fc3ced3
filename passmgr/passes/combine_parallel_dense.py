"""CombineParallelDense: several dense/matmul ops reading the same input become one.

`dense(x, W1) ... dense(x, Wn)` (or `matmul(x, Wi)` with 2-D weights, as ONNX exporters write
it) is rewritten to one product with the weights concatenated along the output axis, followed by
a `split` of its last axis. When every branch is followed by a bias (`add` or `bias_add` of a
1-D tensor along the last axis), the biases are concatenated too and the add happens once.
One large product uses the cores and caches far better than several small ones (the rule that
pays most in TASO/TENSAT); Q/K/V projections of attention are the typical case.

This is a deterministic IR pass, as in TVM, not a rule: it matches a variable number of roots.
Only weights and biases that are constants or parameters of the function are combined, so the
concatenation is valid wherever the branches are; constant weights are concatenated right
away, parameter weights through a `concatenate` call.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from egraph_ir import op
from egraph_ir.errors import ConfigError, Span
from egraph_ir.expr import Call, Constant, Expr, Function, TupleGetItem, Var, children, op_name
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType
from egraph_ir.visitor import ExprMutator, post_order

from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record


@dataclass
class _Branch:
    head: Call  # the dense or matmul
    tail: Call  # the node whose value the branch replaces: the head or its bias add
    bias: Expr | None = None
    head_pos: int = 0  # which argument of the bias add is the head


@dataclass
class _Group:
    kind: str  # "dense" or "matmul"
    branches: list[_Branch] = field(default_factory=list)


def _tensor(e: Expr) -> TensorType | None:
    t = e.checked_type
    return t if isinstance(t, TensorType) else None


def _out_units(head: Call) -> int:
    t = _tensor(head)
    assert t is not None
    return t.shape[-1]


class _Finder:
    """Groups of parallel products over one input, with their bias epilogues."""

    def __init__(self, fn: Function) -> None:
        self.params = set(fn.params)
        self.users: dict[Expr, list[Expr]] = defaultdict(list)
        nodes = list(post_order(fn))
        for node in nodes:
            for child in children(node):
                self.users[child].append(node)
        self.nodes = nodes

    def movable(self, e: Expr) -> bool:
        return isinstance(e, Constant) or (isinstance(e, Var) and e in self.params)

    def key(self, node: Expr) -> tuple[object, ...] | None:
        name = op_name(node)
        if name not in ("dense", "matmul"):
            return None
        assert isinstance(node, Call)
        data, weight = node.args
        td, tw, tout = _tensor(data), _tensor(weight), _tensor(node)
        if td is None or tw is None or tout is None or tw.ndim != 2 or td.ndim < 1:
            return None
        if not self.movable(weight) or tw.dtype != td.dtype or tout.dtype != td.dtype:
            return None
        reduced = tw.shape[1] if name == "dense" else tw.shape[0]
        return (data, name, reduced, td.dtype)

    def bias_of(self, head: Call) -> tuple[Call, Expr, int] | None:
        users = self.users[head]
        if len(users) != 1 or op_name(users[0]) not in ("add", "bias_add"):
            return None
        tail = users[0]
        assert isinstance(tail, Call)
        pos = 0 if tail.args[0] is head else 1
        if tail.args[pos] is not head or tail.args[1 - pos] is head:
            return None
        bias = tail.args[1 - pos]
        tb, th = _tensor(bias), _tensor(head)
        if tb is None or th is None or not self.movable(bias):
            return None
        if tb.shape != (th.shape[-1],) or tb.dtype != th.dtype:
            return None
        if op_name(tail) == "bias_add" and (
            pos != 0 or tail.attrs["axis"] % th.ndim != th.ndim - 1
        ):
            return None
        return tail, bias, pos

    def groups(self, min_branches: int) -> list[_Group]:
        by_key: dict[tuple[object, ...], _Group] = {}
        for node in self.nodes:
            key = self.key(node)
            if key is not None:
                assert isinstance(node, Call)
                group = by_key.setdefault(key, _Group(str(key[1])))
                group.branches.append(_Branch(node, node))
        found = [g for g in by_key.values() if len(g.branches) >= min_branches]
        for group in found:
            epilogues = [self.bias_of(b.head) for b in group.branches]
            if all(e is not None for e in epilogues):
                for branch, (tail, bias, pos) in zip(group.branches, epilogues, strict=True):  # type: ignore[misc]
                    branch.tail, branch.bias, branch.head_pos = tail, bias, pos
        return found


def _concat(parts: list[Expr], axis: int) -> Expr:
    if all(isinstance(p, Constant) for p in parts):
        return Constant(np.concatenate([p.data for p in parts], axis=axis))  # type: ignore[attr-defined]
    return op.concatenate(*parts, axis=axis)


class _Combiner(ExprMutator):
    """Replace each branch's tail by its piece of the combined product."""

    def __init__(self, groups: list[_Group]) -> None:
        super().__init__()
        self.groups = groups
        self.where = {
            b.tail: (g, i) for g, group in enumerate(groups) for i, b in enumerate(group.branches)
        }
        self.combined: dict[int, Expr] = {}

    def rewrite_call(self, pre: Call, post: Call) -> Expr:  # type: ignore[override]
        hit = self.where.get(pre)
        if hit is None:
            return post
        g, i = hit
        group = self.groups[g]
        branch = group.branches[i]
        if g not in self.combined:
            head = post if branch.tail is branch.head else post.args[branch.head_pos]
            assert isinstance(head, Call)
            self.combined[g] = self.build(group, head.args[0])
        return TupleGetItem(self.combined[g], i)

    @staticmethod
    def build(group: _Group, data: Expr) -> Expr:
        # the combined product computes what the branches' nodes did: profiles name them
        span = Span.join(s for b in group.branches for s in (b.head.span, b.tail.span))
        weights = [b.head.args[1] for b in group.branches]
        if group.kind == "dense":
            product: Expr = replace(op.dense(data, _concat(weights, axis=0)), span=span)
        else:
            product = replace(op.matmul(data, _concat(weights, axis=1)), span=span)
        biases = [b.bias for b in group.branches]
        if all(b is not None for b in biases):
            bias = _concat(biases, axis=0)  # type: ignore[arg-type]
            product = replace(op.add(product, bias), span=span)
        cuts, total = [], 0
        for b in group.branches[:-1]:
            total += _out_units(b.head)
            cuts.append(total)
        return op.split(product, indices_or_sections=tuple(cuts), axis=-1)


@register_pass
@dataclass(frozen=True)
class CombineParallelDense(FunctionPass):
    """Merge at least `min_num_branches` dense/matmul ops that share an input into one."""

    idempotent = True

    min_num_branches: int = 3
    opt_level = 3  # TVM uses 4; on CPUs one large product always beats several small ones
    required = ("InferType",)

    def __post_init__(self) -> None:
        if self.min_num_branches < 2:
            raise ConfigError(
                f"CombineParallelDense: min_num_branches must be at least 2, got "
                f"{self.min_num_branches}"
            )

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        if not fn.body.has_type:
            infer_type(mod)  # also callable on its own, outside a Sequential
        groups = _Finder(fn).groups(self.min_num_branches)
        record(CombineReport(len(groups), sum(len(g.branches) for g in groups)))
        if not groups:
            return fn
        out = _Combiner(groups).visit(fn)
        assert isinstance(out, Function)
        return out


@dataclass(frozen=True, slots=True)
class CombineReport(PassReport):
    """Groups of parallel products combined in one function, and products in them."""

    groups_combined: int
    products_combined: int
