"""Put the dataflow of a function body into a TensorEGraph, node by node.

Calls of ops, tuples, tuple fields, variables and constants are encoded; anything else
(Let, If, functions, calls of functions) is an opaque leaf: its inside is optimised on its
own by the pass, never across the boundary. Equal constants share one key, so the e-graph
starts with common constants merged. Requires inferred types.
"""

from __future__ import annotations

import hashlib
import weakref

from ..expr import Call, Constant, Expr, Tuple, TupleGetItem, Var
from ..op.nn import norm_padding, norm_pair
from ..registry import Op
from ..types import TensorType
from .graph import TensorEGraph, encode_attr

_KEYS: dict[int, tuple[weakref.ref, str]] = {}  # id(array) -> (the array, its key)


def constant_key(c: Constant) -> str:
    """dtype, shape and a digest of the bytes: equal constants, equal keys. Each array is
    hashed once while it lives (every EqSat pass encodes the same weights: ResNet-18's 45
    MB took 60 ms a pass)."""
    data = c.data
    known = _KEYS.get(id(data))
    if known is not None and known[0]() is data and not data.flags.writeable:
        return known[1]
    digest = hashlib.blake2b(data.tobytes(), digest_size=12).hexdigest()
    key = f"{data.dtype}{list(data.shape)}:{digest}".replace(" ", "")
    if not data.flags.writeable:  # a writeable array may change under the same id
        ident = id(data)
        _KEYS[ident] = (weakref.ref(data, lambda _: _KEYS.pop(ident, None)), key)
    return key


WINDOW_OPS = (
    "conv2d", "conv2d_nchwc", "conv2d_winograd", "qnn_conv2d", "qnn_conv2d_nchwc", "max_pool2d",
    "avg_pool2d",
)  # fmt: skip


def canonical_attrs(call: Call) -> dict[str, object]:
    """Attributes in a form where equal meaning is equal text: transpose axes made
    explicit, a 2-D window's padding as (top, left, bottom, right) and its strides and
    dilation as pairs, so a rule written `padding=[0, 0, 0, 0]` matches `padding=[0]`."""
    attrs = dict(call.attrs)
    name = call.op.name if isinstance(call.op, Op) else ""
    if name == "transpose" and attrs["axes"] is None:
        ty = call.args[0].checked_type
        assert isinstance(ty, TensorType)
        attrs["axes"] = tuple(reversed(range(ty.ndim)))
    if name in WINDOW_OPS:
        if "padding" in attrs:
            attrs["padding"] = norm_padding(attrs["padding"])
        for pair in ("strides", "dilation"):
            if pair in attrs:
                attrs[pair] = norm_pair(attrs[pair], pair)
    return attrs


def _operands(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Call) and isinstance(e.op, Op):
        return e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    return ()


def encode(g: TensorEGraph, root: Expr) -> int:
    """Insert the dataflow under root (iteratively, shared nodes once); return root's handle."""
    handle: dict[Expr, int] = {}
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in handle:
            continue
        kids = _operands(node)
        if not expanded:
            stack.append((node, True))
            stack.extend((k, False) for k in reversed(kids) if k not in handle)
            continue
        ty = node.checked_type
        refs = " ".join(f"(H {handle[k]})" for k in kids)
        if isinstance(node, Var):
            # the key goes into egglog program text: only the name's safe characters
            safe = "".join(c if c.isalnum() or c == "_" else "_" for c in node.name_hint)
            key = f"{safe}#{id(node)}"
            g.leaves[key] = node
            handle[node] = g.add(f'(Var "{key}")', ty)
        elif isinstance(node, Constant):
            key = constant_key(node)
            g.constants.setdefault(key, node)
            handle[node] = g.add(f'(Const "{key}")', ty)
        elif isinstance(node, Call) and isinstance(node.op, Op):
            ctor = g.op_ctor(node.op, len(kids))
            attrs = canonical_attrs(node)
            lits = " ".join(f'"{encode_attr(attrs[a.name])}"' for a in node.op.attrs)
            handle[node] = g.add(f"({ctor} {refs} {lits})".replace("  ", " "), ty)
            if node.span is not None:
                g.spans[handle[node]] = node.span
        elif isinstance(node, Tuple):
            handle[node] = g.add(f"({g.tuple_ctor(len(kids))} {refs})", ty)
        elif isinstance(node, TupleGetItem):
            handle[node] = g.add(f"(Get {refs} {node.index})", ty)
        else:
            key = f"opaque#{id(node)}"
            g.leaves[key] = node
            handle[node] = g.add(f'(Opaque "{key}")', ty)
        if kids:  # where a call's name goes when a rewrite absorbs it (egraph/spans.py)
            g.operands[handle[node]] = [handle[k] for k in kids]
    g.encoded += len(handle)
    return handle[root]


def merge_equal(root: Expr) -> tuple[Expr, int]:
    """root with equal computations built once, and how many nodes were merged: exactly
    what encoding into the e-graph does (same op, canonical attributes and operands;
    constants by value; anything else by identity), without building the e-graph, for
    passes with no rules (common-subexpression elimination)."""
    from ..visitor import post_order, rebuild
    from .graph import encode_attr

    canon: dict[tuple[object, ...], Expr] = {}
    memo: dict[Expr, Expr] = {}
    merged = 0
    transparent = (Call, Tuple, TupleGetItem)
    for node in post_order(root, stop=lambda e: not isinstance(e, transparent)):
        if isinstance(node, Call) and isinstance(node.op, Op):
            attrs = canonical_attrs(node)
            lits = tuple(encode_attr(attrs[a.name]) for a in node.op.attrs)
            key: tuple[object, ...] = ("op", node.op.name, lits, *map(id, map(memo.get, node.args)))
        elif isinstance(node, Tuple):
            key = ("tuple", *map(id, map(memo.get, node.fields)))
        elif isinstance(node, TupleGetItem):
            key = ("get", node.index, id(memo[node.tuple_value]))
        elif isinstance(node, Constant):
            key = ("const", constant_key(node))
        else:
            key = ("leaf", id(node))  # variables, functions, lets, ifs, calls of functions
        if key in canon:
            memo[node] = canon[key]
            merged += 1
            continue
        new = node if key[0] in ("leaf", "const") else rebuild(node, memo)
        canon[key] = memo[node] = new
    return memo[root], merged
