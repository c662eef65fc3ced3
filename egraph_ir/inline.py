"""Inline calls: a call of a function literal (a composite from MergeComposite, a closure
called in place) or of a chosen global function becomes the function's body over the
call's arguments."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var, children
from .loops import is_loop
from .visitor import post_order, rebuild

Selector = Callable[[Function], bool]


def _is_plain_call(fn: Function) -> bool:
    """Neither a kernel, an external region nor a loop (whose call runs it many times)."""
    return not (fn.attrs.get("Primitive") or fn.attrs.get("Compiler") or is_loop(fn))


def inline_calls(
    expr: Expr,
    select: Selector = _is_plain_call,
    functions: Mapping[str, Function] | None = None,
) -> Expr:
    """`expr` with every call of a function literal that `select` accepts inlined (by
    default: every function that is neither a fused kernel, an external region nor a loop), and
    every call of a global named in `functions` (whose value is the function to inline).
    Nested literals are inlined too; functions bound to variables are left alone."""
    functions = functions or {}
    memo: dict[Expr, Expr] = {}
    for node in post_order(expr, into_functions=False):
        callee = _inlined(node, select, functions)
        if isinstance(node, Var | Constant):
            memo[node] = node
        elif callee is not None:
            assert isinstance(node, Call)
            inner: dict[Expr, Expr] = dict(
                zip(callee.params, (memo[a] for a in node.args), strict=True)
            )
            body = inline_calls(callee.body, select)  # function nesting is shallow
            for n in post_order(body, into_functions=False):
                if n not in inner:
                    inner[n] = (
                        n if isinstance(n, Var | Constant) else rebuild_keeping_functions(n, inner)
                    )
            memo[node] = inner[body]
        elif isinstance(node, TupleGetItem) and isinstance(source := memo[node.tuple_value], Tuple):
            memo[node] = source.fields[node.index]  # a field of an inlined tuple
        else:
            memo[node] = rebuild_keeping_functions(node, memo)
    return memo[expr]


def _inlined(node: Expr, select: Selector, functions: Mapping[str, Function]) -> Function | None:
    if not isinstance(node, Call):
        return None
    if isinstance(node.op, Function) and select(node.op):
        return node.op
    if isinstance(node.op, GlobalVar):
        return functions.get(node.op.name_hint)
    return None


def rebuild_keeping_functions(node: Expr, memo: dict[Expr, Expr]) -> Expr:
    """rebuild() where function literals (not visited) stay as they are."""
    for child in children(node):
        if isinstance(child, Function) and child not in memo:
            memo[child] = child
    return rebuild(node, memo)


def inline_function(
    fn: Function,
    select: Selector = _is_plain_call,
    functions: Mapping[str, Function] | None = None,
) -> Function:
    """`fn` with its calls inlined as by inline_calls."""
    body = inline_calls(fn.body, select, functions)
    return fn if body is fn.body else Function(fn.params, body, fn.ret_type, fn.attrs, fn.span)


def inline_lets(expr: Expr, functions_too: bool = False) -> Expr:
    """expr with every let whose value is not a function (or every let, with
    `functions_too`) replaced by its body, the variable's uses reading the value itself:
    the graph form a dataflow executor and fusion need (a value used twice is one shared
    node). Function literals below are kept as they are."""
    from .expr import Let

    nodes = list(post_order(expr, stop=lambda e: isinstance(e, Function) and e is not expr))
    lets = {
        e.var: e
        for e in nodes
        if isinstance(e, Let) and (functions_too or not isinstance(e.value, Function))
    }
    memo: dict[Expr, Expr] = {}
    for e in nodes:
        if isinstance(e, Var) and e in lets:
            memo[e] = memo[lets[e].value]
        elif isinstance(e, Let) and e.var in lets:
            memo[e] = memo[e.body]
        elif isinstance(e, Var | Constant | GlobalVar) or (
            isinstance(e, Function) and e is not expr
        ):
            memo[e] = e
        else:
            memo[e] = rebuild(e, memo)
    return memo[expr]


CLOSURE_ROUNDS = 32  # each round removes one level of functions passed or returned as values


def reduce_closures(expr: Expr) -> Expr:
    """expr with every call of a function value known where it is made inlined: a let-bound
    function, a function passed to another (`twice(sigmoid)`), a closure a call returns
    and then called (`twice(sg)(p)`). What a data-flow executor needs: no function values
    at run time. Kernels, external regions and loops stay calls. A program whose closures
    do not reduce in CLOSURE_ROUNDS rounds (a recursive let) is returned as it is."""
    for _ in range(CLOSURE_ROUNDS):
        expr = inline_lets(expr, functions_too=True) if _has_function_lets(expr) else expr
        memo: dict[Expr, Expr] = {}
        changed = False
        for node in post_order(expr):
            if isinstance(node, Var | Constant | GlobalVar):
                memo[node] = node
                continue
            new = rebuild(node, memo)
            if isinstance(new, Call) and isinstance(new.op, Function) and _is_plain_call(new.op):
                params: dict[Expr, Expr] = dict(zip(new.op.params, new.args, strict=True))
                new = _substitute(new.op.body, params)
                changed = True
            memo[node] = new
        expr = memo[expr]
        if not changed:
            break
    return expr


def _has_function_lets(expr: Expr) -> bool:
    from .expr import Let

    return any(isinstance(e, Let) and isinstance(e.value, Function) for e in post_order(expr))


def _substitute(body: Expr, values: Mapping[Expr, Expr]) -> Expr:
    """body with each variable of `values` replaced, inside nested functions too (variables
    are objects: nothing can be captured by mistake)."""
    memo: dict[Expr, Expr] = dict(values)
    for node in post_order(body):
        if node in memo:
            continue
        leaf = isinstance(node, Var | Constant | GlobalVar)
        memo[node] = node if leaf else rebuild(node, memo)
    return memo[body]
