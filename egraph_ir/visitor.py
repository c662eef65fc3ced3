"""Stack-safe traversal: a post-order iterator, a dispatching functor, a visitor and a mutator.

Dataflow graphs can be 100,000 nodes deep, so nothing here recurses in Python: the visitor
and the mutator walk an explicit stack and call their per-kind hooks children first, once per
node (shared sub-expressions are visited and rewritten once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    children,
    op_name,
)


def post_order(
    expr: Expr,
    enter: Callable[[Expr], None] | None = None,
    into_functions: bool = True,
    stop: Callable[[Expr], bool] | None = None,
) -> Iterator[Expr]:
    """Yield every node reachable from expr exactly once, children before parents.

    `enter(node)` is called when a node is first reached, before its children. With
    `into_functions=False`, function literals below expr (fused kernels, closures) are
    skipped whole: only the dataflow around them is visited. A node for which `stop(node)`
    is true is yielded without its children.
    """
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        if enter is not None:
            enter(node)
        stack.append((node, True))
        if stop is not None and node is not expr and stop(node):
            continue
        kids = children(node)
        for child in reversed(kids):
            if id(child) in seen or (not into_functions and isinstance(child, Function)):
                continue
            stack.append((child, False))


def free_vars(expr: Expr) -> list[Var]:
    """Variables used but not bound (by a function parameter or a let) inside expr."""
    bound: set[Var] = set()
    used: list[Var] = []

    def enter(node: Expr) -> None:
        if isinstance(node, Function):
            bound.update(node.params)
        elif isinstance(node, Let):
            bound.add(node.var)

    for node in post_order(expr, enter):
        if isinstance(node, Var):
            used.append(node)
    return [v for v in used if v not in bound]


_KIND = {
    Var: "var",
    Constant: "constant",
    GlobalVar: "global_var",
    Call: "call",
    Tuple: "tuple",
    TupleGetItem: "tuple_getitem",
    Function: "function",
    Let: "let",
    If: "if",
}


def kind_of(e: Expr) -> str:
    return _KIND[type(e)]


class ExprFunctor:
    """Dispatch `visit(e)` to `visit_<kind>(e)`: var, constant, global_var, call, tuple,
    tuple_getitem, function, let, if. No traversal or memo; recursion is the subclass's
    choice (prefer ExprVisitor / ExprMutator for deep dataflow)."""

    def visit(self, e: Expr) -> Any:
        return getattr(self, "visit_" + _KIND[type(e)])(e)

    def _unhandled(self, e: Expr) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not handle {type(e).__name__}")

    visit_var = visit_constant = visit_global_var = visit_call = visit_tuple = _unhandled
    visit_tuple_getitem = visit_function = visit_let = visit_if = _unhandled


class ExprVisitor(ExprFunctor):
    """Visit every reachable node once, children first. Override the hooks you need; there is
    no need to call the parent hook to continue the traversal."""

    def visit(self, e: Expr) -> None:
        for node in post_order(e):
            getattr(self, "visit_" + _KIND[type(node)])(node)

    def _nothing(self, e: Expr) -> None:
        return None

    visit_var = visit_constant = visit_global_var = visit_call = visit_tuple = _nothing
    visit_tuple_getitem = visit_function = visit_let = visit_if = _nothing


class ExprMutator:
    """Rebuild an expression bottom-up, memoised: each node is rewritten once.

    For each node, children first, `rewrite_<kind>(pre, post)` is called, where `pre` is the
    original node and `post` the node rebuilt on the already-rewritten children (the same
    object when no child changed). Return post to keep it, or a replacement. Rewriting a Var
    replaces it everywhere, binding sites included (then it must stay a Var).
    """

    def __init__(self) -> None:
        self.memo: dict[Expr, Expr] = {}

    def visit(self, e: Expr) -> Expr:
        memo = self.memo
        for node in post_order(e):
            if node in memo:
                continue
            post = rebuild(node, memo)
            memo[node] = getattr(self, "rewrite_" + _KIND[type(node)])(node, post)
        return memo[e]

    def _keep(self, pre: Expr, post: Expr) -> Expr:
        return post

    rewrite_var = rewrite_constant = rewrite_global_var = rewrite_call = rewrite_tuple = _keep
    rewrite_tuple_getitem = rewrite_function = rewrite_let = rewrite_if = _keep


def _as_var(e: Expr, where: str) -> Var:
    if not isinstance(e, Var):
        raise TypeError(f"{where} was rewritten to a {type(e).__name__}; binding sites need a Var")
    return e


def rebuild(node: Expr, memo: dict[Expr, Expr]) -> Expr:
    """`node` with each child replaced by memo[child]; the node itself if nothing changed."""
    match node:
        case Call():
            op = memo[node.op] if isinstance(node.op, Expr) else node.op
            args = tuple(memo[a] for a in node.args)
            if op is node.op and all(a is b for a, b in zip(args, node.args, strict=True)):
                return node
            return Call(op, args, node.attrs, node.span)  # type: ignore[arg-type]
        case Tuple():
            fields = tuple(memo[f] for f in node.fields)
            if all(a is b for a, b in zip(fields, node.fields, strict=True)):
                return node
            return Tuple(fields, node.span)
        case TupleGetItem():
            t = memo[node.tuple_value]
            return node if t is node.tuple_value else TupleGetItem(t, node.index, node.span)
        case Function():
            params = tuple(_as_var(memo[p], "a function parameter") for p in node.params)
            body = memo[node.body]
            if body is node.body and all(a is b for a, b in zip(params, node.params, strict=True)):
                return node
            return Function(params, body, node.ret_type, node.attrs, node.span)
        case Let():
            v, value, body = (
                _as_var(memo[node.var], "a let variable"),
                memo[node.value],
                memo[node.body],
            )
            if v is node.var and value is node.value and body is node.body:
                return node
            return Let(v, value, body, node.span)
        case If():
            c, t, f = memo[node.cond], memo[node.true_branch], memo[node.false_branch]
            if c is node.cond and t is node.true_branch and f is node.false_branch:
                return node
            return If(c, t, f, node.span)
        case _:
            return node


CallRewrite = Callable[[Call, list[Expr], Callable[[Expr], Expr]], Expr]


def rewrite_calls(fn: Function, names: frozenset[str] | set[str], rewrite: CallRewrite) -> Function:
    """fn with every call of an op in `names` replaced, bottom up, by rewrite(the original
    call, its rewritten arguments, a lookup from original to rewritten nodes)."""
    memo: dict[Expr, Expr] = {}
    for node in post_order(fn):
        if isinstance(node, Var | Constant | GlobalVar):
            memo[node] = node
            continue
        post = rebuild(node, memo)
        if isinstance(node, Call) and isinstance(post, Call) and op_name(post) in names:
            post = rewrite(node, list(post.args), memo.__getitem__)
        memo[node] = post
    out = memo[fn]
    assert isinstance(out, Function)
    return out
