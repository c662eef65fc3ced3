"""FuseOps: group operators into primitive functions that codegen turns into single kernels.

TVM's rules, driven by each op's fusion pattern and the post-dominator tree of the dataflow:

- an elementwise, broadcast or injective op fuses into its immediate post-dominator when
  every op on the paths between them is injective or better (the post-dominator may also be
  a reduction: the injective ops are then inlined into the reduction's loads);
- an out-elementwise-fusable op (dense, matmul, conv2d, pooling) or a reduction takes its
  epilogue: fuses into its post-dominator when every op on the way is elementwise or
  broadcast and keeps its output shape (bias, activation, residual add);
- opaque ops (norms, scans) and tuple-valued ops stand alone; softmax takes an epilogue
  (also one that casts, as TVM's softmax + cast);
- a group holds at most one such anchor and at most `fuse.max_depth` ops.

Before grouping, `split(x).i` is rewritten to a strided slice of x (see split_to_slices).

Fusing along every path to the post-dominator is what makes diamonds safe: no value leaves
a group and comes back. Each group becomes `fn (...) { ... }` with the `Primitive` attribute,
called from the function; constants stay inside. Let-bound values are first substituted
(a value used twice is one shared node, as in TVM's graph form). Around an If, each branch
is fused as its own region and the If is a leaf of the dataflow around it. At opt level 0
every op is its own group (TVM's fuse_opt_level 0).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from egraph_ir.errors import ConfigError
from egraph_ir.expr import Call, Constant, Expr, Function, If, TupleGetItem, Var, children, op_name
from egraph_ir.infer import infer_type
from egraph_ir.inline import inline_lets
from egraph_ir.module import IRModule
from egraph_ir.op import call as op_call
from egraph_ir.op.shape import split_bounds
from egraph_ir.registry import Op, OpPattern
from egraph_ir.types import TensorType
from egraph_ir.visitor import free_vars, post_order, rebuild

from ..config import register_config
from ..context import PassContext
from ..pass_base import ModulePass
from ..registry import register_pass
from ..run import PassReport, record

MAX_GROUP_DEPTH = 256  # TVM's default; codegen builds a group's element as one expression
register_config(
    "fuse.max_depth", int, MAX_GROUP_DEPTH, f"most ops in one fused group (1 to {MAX_GROUP_DEPTH})"
)

# codegen computes a group's element as one expression, so a value fused into a group is
# recomputed at each use there: one read by more than this many ops (a padded map read by
# the 25 taps of a 5x5 window, passmgr/passes/expand_mlas.py) is materialised instead
MAX_FANOUT = 4
ANCHORS = (OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE)
ROW_ANCHORS = frozenset({"softmax", "log_softmax"})
SCRATCH_ANCHORS = frozenset({"qnn_conv2d", "qnn_conv2d_nchwc", "qnn_matmul", "qnn_dense"})
# ops that read each input element many times (im2col: a window's worth): a producer
# fused into them would be computed that many times, and they fused into a consumer would
# lose the nest that makes their own indices loop variables; their groups are their own
REREADING = frozenset({"im2col"})
SINK = None  # the post-dominator of values that leave the dataflow (outputs, tuples)


def pattern_of(call: Call) -> OpPattern:
    """The op's pattern; tuple-valued calls and non-tensor inputs make it opaque."""
    if not isinstance(call.op, Op) or not isinstance(call.checked_type, TensorType):
        return OpPattern.OPAQUE
    if any(not isinstance(a.checked_type, TensorType) for a in call.args):
        return OpPattern.OPAQUE
    if _table_lookup(call):
        return OpPattern.ELEMWISE
    return call.op.pattern


def _table_lookup(call: Call) -> bool:
    """take(constant table, indices) over a 1-D table: each element reads only the index
    at its own position, so it fuses like an elementwise op (a quantised sigmoid's table,
    CanonicalizeQnn, joins the convolution's epilogue)."""
    if not (isinstance(call.op, Op) and call.op.name == "take" and len(call.args) == 2):
        return False
    table, indices = call.args
    index_t, out_t = indices.checked_type, call.checked_type
    if not (isinstance(index_t, TensorType) and isinstance(out_t, TensorType)):
        return False
    return isinstance(table, Constant) and table.data.ndim == 1 and index_t.shape == out_t.shape


class _Groups:
    """Union-find over calls, tracking each group's size and anchor."""

    def __init__(self, calls: list[Call]) -> None:
        self.parent: dict[Call, Call] = {c: c for c in calls}
        self.size = dict.fromkeys(calls, 1)
        self.anchors = {c: int(pattern_of(c) in ANCHORS) for c in calls}
        self.anchor: dict[Call, Call | None] = {
            c: c if pattern_of(c) in ANCHORS else None for c in calls
        }

    def find(self, c: Call) -> Call:
        root = c
        while self.parent[root] is not root:
            root = self.parent[root]
        while self.parent[c] is not root:
            self.parent[c], c = root, self.parent[c]
        return root

    def can_merge(self, members: list[Call], max_size: int) -> bool:
        roots = {self.find(m) for m in members}
        return (
            sum(self.size[r] for r in roots) <= max_size
            and sum(self.anchors[r] for r in roots) <= 1
        )

    def merge(self, members: list[Call]) -> None:
        roots = list({self.find(m): None for m in members})
        first = roots[0]
        for r in roots[1:]:
            self.parent[r] = first
            self.size[first] += self.size[r]
            self.anchors[first] += self.anchors[r]
            self.anchor[first] = self.anchor[first] or self.anchor[r]


def _post_dominators(calls: list[Call], users: dict[Expr, list[Expr]]) -> dict[Call, Call | None]:
    """Immediate post-dominator of each call among calls (None: the sink)."""
    ipdom: dict[Call, Call | None] = {}
    depth: dict[Call | None, int] = {SINK: 0}

    def lca(a: Call | None, b: Call | None) -> Call | None:
        while a is not b:
            if depth[a] >= depth[b]:
                a = ipdom[a]  # type: ignore[index]
            else:
                b = ipdom[b]  # type: ignore[index]
        return a

    for c in reversed(calls):
        outs = users.get(c, [])
        if not outs or any(not isinstance(u, Call) or u not in depth for u in outs):
            ipdom[c] = SINK
        else:
            p: Call | None = outs[0]  # type: ignore[assignment]
            for u in outs[1:]:
                p = lca(p, u)  # type: ignore[arg-type]
            ipdom[c] = p
        depth[c] = depth[ipdom[c]] + 1
    return ipdom


def _path(start: Call, end: Call, users: dict[Expr, list[Expr]], limit: int) -> list[Call]:
    """Every call on a path from start (exclusive) to end (inclusive); [] when a value
    escapes or there are more than `limit` calls (such a group could not be formed anyway,
    and stopping early keeps fusion linear on graphs with long-range fan-out)."""
    seen: set[Expr] = set()
    out: list[Call] = []
    stack = list(users.get(start, []))
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if not isinstance(n, Call) or len(out) >= limit:
            return []  # the value escapes (not a convex region), or the region is too big
        out.append(n)
        if n is not end:
            stack.extend(users.get(n, []))
    return out


def _fusable(n: Call, path: list[Call], end: Call, anchor: Call | None) -> bool:
    """May n's group absorb the path to its post-dominator? `anchor` is the anchor already in
    n's group: then n is part of its epilogue, and the epilogue rule applies."""
    kind = pattern_of(n)
    if op_name(n) in REREADING:
        return False
    if anchor is None and kind in ANCHORS:
        anchor = n
    if anchor is not None:
        return all(
            pattern_of(m) <= OpPattern.BROADCAST and _epilogue_keeps(m, anchor) for m in path
        )
    if kind <= OpPattern.INJECTIVE:
        if any(op_name(m) in REREADING for m in path):
            return False
        return all(
            pattern_of(m) <= OpPattern.INJECTIVE
            or (m is end and pattern_of(m) == OpPattern.COMM_REDUCE)
            for m in path
        )
    return False


def _epilogue_keeps(m: Call, anchor: Call) -> bool:
    """An epilogue op keeps the anchor's shape; it may change the dtype only after anchors
    whose elements are computed one at a time (reductions, softmax: codegen applies the
    epilogue in registers) or kept in scratch (qnn_conv2d's, qnn_matmul's and qnn_dense's
    int32 sums, requantized or rescaled), not after products, convolutions and pools,
    whose results are written to the group's output first."""
    mt, at = m.checked_type, anchor.checked_type
    assert isinstance(mt, TensorType) and isinstance(at, TensorType)
    if mt.shape != at.shape:
        return False
    return (
        mt.dtype == at.dtype
        or pattern_of(anchor) == OpPattern.COMM_REDUCE
        or op_name(anchor) in ROW_ANCHORS
        or op_name(anchor) in SCRATCH_ANCHORS
    )


def split_to_slices(fn: Function) -> Function:
    """`split(x).i` becomes a strided_slice of x: an injective op that fuses with its
    consumers, where a tuple-valued split would stand alone and copy every piece."""
    memo: dict[Expr, Expr] = {}
    for n in post_order(fn.body):
        if isinstance(n, TupleGetItem) and op_name(n.tuple_value) == "split":
            call = n.tuple_value
            assert isinstance(call, Call)
            data = memo[call.args[0]]
            t = call.args[0].checked_type
            assert isinstance(t, TensorType)
            axis = call.attrs["axis"] % t.ndim
            start, stop = split_bounds(t.shape[axis], call.attrs["indices_or_sections"])[n.index]
            memo[n] = op_call("strided_slice", data, begin=(start,), end=(stop,), axes=(axis,))
        elif isinstance(n, Var | Constant | Function):
            memo[n] = n
        else:
            memo[n] = rebuild(n, memo)
    body = memo[fn.body]
    return fn if body is fn.body else Function(fn.params, body, fn.ret_type, fn.attrs, fn.span)


def fuse_function(fn: Function, max_depth: int) -> tuple[Function, int]:
    """The function with its calls grouped into primitive functions; also the group count."""
    body = inline_lets(fn.body)  # let-bound values become shared dataflow nodes
    if body is not fn.body:
        fn = fn.with_body(body)
    fn = split_to_slices(fn)
    infer_type(fn)
    if any(isinstance(n, If) for n in post_order(fn.body)):
        body, count = _fuse_around_ifs(fn.body, max_depth)
        return Function(fn.params, body, fn.ret_type, fn.attrs, fn.span), count
    return _fuse_dataflow(fn, max_depth)


def _fuse_around_ifs(expr: Expr, max_depth: int) -> tuple[Expr, int]:
    """Each branch (and condition) of every if fused as its own region, then the dataflow
    around the ifs, where an if is a leaf like a variable. Recursion follows the nesting of
    ifs only (control flow, not dataflow depth)."""
    memo: dict[Expr, Expr] = {}
    count = 0
    for e in post_order(expr, stop=lambda e: isinstance(e, If | Function)):
        if isinstance(e, If):
            parts = []
            for part in (e.cond, e.true_branch, e.false_branch):
                fused, n = _fuse_around_ifs(part, max_depth)
                parts.append(fused)
                count += n
            memo[e] = If(parts[0], parts[1], parts[2], e.span)
        elif isinstance(e, Var | Constant | Function):
            memo[e] = e
        else:
            memo[e] = rebuild(e, memo)
    outer = memo[expr]
    if isinstance(outer, Var | Constant | If | Function):
        return outer, count
    region = Function(tuple(free_vars(outer)), outer)
    infer_type(region)
    fused, n = _fuse_dataflow(region, max_depth)
    return fused.body, count + n


def _fuse_dataflow(fn: Function, max_depth: int) -> tuple[Function, int]:
    """Grouping over the dataflow of fn's body; ifs (and functions) are leaves."""
    nodes = list(post_order(fn.body, stop=lambda e: isinstance(e, If | Function)))
    calls = [n for n in nodes if isinstance(n, Call) and isinstance(n.op, Op)]
    users: dict[Expr, list[Expr]] = defaultdict(list)
    for n in nodes:
        for c in dict.fromkeys(children(n)):
            users[c].append(n)
    ipdom = _post_dominators(calls, users)
    groups = _Groups(calls)
    for n in calls:
        end = ipdom[n]
        if end is None or len(users[n]) > MAX_FANOUT:
            continue
        path = _path(n, end, users, max_depth)
        anchor = groups.anchor[groups.find(n)]
        if path and _fusable(n, path, end, anchor) and groups.can_merge([n, *path], max_depth):
            groups.merge([n, *path])
    return _materialise(fn, nodes, calls, users, groups), len({groups.find(c) for c in calls})


def _materialise(
    fn: Function,
    nodes: list[Expr],
    calls: list[Call],
    users: dict[Expr, list[Expr]],
    groups: _Groups,
) -> Function:
    by_root: dict[Call, list[Call]] = defaultdict(list)
    for c in calls:  # topological order is kept inside each group
        by_root[groups.find(c)].append(c)
    group_of: dict[Call, list[Call]] = {}  # output call -> its group
    for group in by_root.values():
        inside = set(group)
        outs = [m for m in group if m is fn.body or any(u not in inside for u in users[m])]
        if len(outs) == 1:
            group_of[outs[0]] = group
        else:  # cannot happen with post-dominator fusion; stay correct anyway
            group_of.update({m: [m] for m in group})
    memo: dict[Expr, Expr] = {}
    for n in nodes:
        if isinstance(n, Call) and isinstance(n.op, Op):
            if n in group_of:
                memo[n] = _primitive_call(n, group_of[n], memo)
            continue  # inner members exist only inside their primitive function
        memo[n] = n if isinstance(n, Var | Constant | If | Function) else rebuild(n, memo)
    return Function(fn.params, memo[fn.body], fn.ret_type, fn.attrs, fn.span)


def _primitive_call(root: Call, group: list[Call], outer: dict[Expr, Expr]) -> Call:
    """`fn (params) Primitive=1 { group }(external args)`."""
    inside = set(group)
    params: dict[Expr, Var] = {}
    inner: dict[Expr, Expr] = {}
    for m in group:  # group is in topological order
        args = []
        for a in m.args:
            if a in inside:
                args.append(inner[a])
            elif isinstance(a, Constant):
                args.append(a)
            else:
                if a not in params:
                    params[a] = Var(f"p{len(params)}", a.checked_type)
                args.append(params[a])
        inner[m] = Call(m.op, tuple(args), m.attrs, m.span)
    prim = Function(tuple(params.values()), inner[root], root.checked_type).with_attr(
        "Primitive", 1
    )
    return Call(prim, tuple(outer[a] for a in params))


@register_pass
@dataclass(frozen=True)
class FuseOps(ModulePass):
    """Fuse operators into primitive functions (see the module docstring)."""

    max_depth: int | None = None  # default: the `fuse.max_depth` config
    opt_level = 0  # codegen needs it at every opt level, as TVM's build does
    required = ("InferType",)
    idempotent = True

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        depth = (
            self.max_depth if self.max_depth is not None else int(ctx.get_config("fuse.max_depth"))
        )
        if not 1 <= depth <= MAX_GROUP_DEPTH:
            raise ConfigError(
                f"fuse.max_depth must be 1 to {MAX_GROUP_DEPTH}, got {depth} (code generation "
                "builds each element of a group as one expression)"
            )
        if ctx.opt_level == 0:
            depth = 1  # no fusion, but every op still becomes a primitive function
        if any(not fn.body.has_type for _, fn in mod.items()):
            infer_type(mod)  # also callable on its own, outside a Sequential
        new = {}
        changed = False
        groups = 0
        for name, fn in mod.items():
            if fn.attrs.get("Primitive") or _already_fused(fn):
                new[name] = fn
                continue
            out, count = fuse_function(fn, depth)
            if out is not fn:
                changed = True
                groups += count
            new[name] = out
        record(FuseReport(groups=groups))
        return infer_type(IRModule(new)) if changed else mod


@dataclass(frozen=True, slots=True)
class FuseReport(PassReport):
    """How many fused groups (primitive functions) FuseOps made."""

    groups: int


def _already_fused(fn: Function) -> bool:
    """True when every call already calls a primitive function (FuseOps ran before)."""
    outer = post_order(fn.body, into_functions=False)
    return not any(isinstance(n, Call) and isinstance(n.op, Op) for n in outer)
