"""ONNX converters for ops with subgraphs: Scan (unrolled over its static sequence length)
and Loop (unrolled over a trip count and conditions known at import, each step's body
converted with that step's values; otherwise a call of a loop function, `Loop=1`); and
If, which becomes the IR's If (or the taken branch when the condition is a constant)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Tuple,
    TupleGetItem,
    Var,
    children,
)
from ...infer import infer_new_nodes
from ...loops import LOOP_ATTR, is_loop
from ...types import TensorType
from ...visitor import post_order, rebuild
from .node import Node, converter


@converter("Scan")
def _scan(n: Node) -> list[Expr]:
    body = n.attr("body")
    count = int(n.attr("num_scan_inputs"))
    inputs = n.inputs()
    states, scanned = inputs[: len(inputs) - count], inputs[len(inputs) - count :]
    n_states = len(states)
    in_axes = [int(a) for a in n.attr("scan_input_axes", [0] * count)]
    in_reverse = [bool(d) for d in n.attr("scan_input_directions", [0] * count)]
    n_out = len(body.output) - n_states
    out_axes = [int(a) for a in n.attr("scan_output_axes", [0] * n_out)]
    out_reverse = [bool(d) for d in n.attr("scan_output_directions", [0] * n_out)]
    types = [n.type(n_states + j) for j in range(count)]
    axes = [a % t.ndim for a, t in zip(in_axes, types, strict=True)]
    lengths = {t.shape[a] for a, t in zip(axes, types, strict=True)}
    if len(lengths) != 1:
        raise FrontendError(f"scan inputs disagree on the sequence length: {sorted(lengths)}")
    steps = lengths.pop()
    names = [i.name for i in body.input]
    produced: list[list[Expr]] = [[] for _ in range(n_out)]
    for t in range(steps):
        bindings = dict(zip(names[:n_states], states, strict=True))
        for j, (x, axis) in enumerate(zip(scanned, axes, strict=True)):
            k = steps - 1 - t if in_reverse[j] else t
            piece = op.strided_slice(x, begin=(k,), end=(k + 1,), axes=(axis,))
            bindings[names[n_states + j]] = op.squeeze(piece, axis=(axis,))
        outs = n.importer.run_graph(body, bindings)
        states = outs[:n_states]
        for j in range(n_out):
            produced[j].append(outs[n_states + j])
    results = list(states)
    for j in range(n_out):
        if not produced[j]:
            raise FrontendError("a scan over an empty sequence has no scan outputs to stack")
        items = produced[j][::-1] if out_reverse[j] else produced[j]
        rank = len(getattr(items[0].checked_type, "shape", ())) + 1
        axis = out_axes[j] % rank
        results.append(op.concatenate(*(op.expand_dims(e, axis=axis) for e in items), axis=axis))
    return results


@converter("If")
def _if(n: Node) -> list[Expr]:
    cond = n.x(0)
    then = n.importer.run_graph(n.attr("then_branch"), {})
    other = n.importer.run_graph(n.attr("else_branch"), {})
    if len(then) != len(other):
        raise FrontendError(f"the branches give {len(then)} and {len(other)} outputs")
    if isinstance(cond, Constant):
        return then if bool(np.asarray(cond.data).reshape(-1)[0]) else other
    t = n.type(0)
    if t.size != 1:
        raise FrontendError(f"the condition must hold one value, got {t}")
    flag = op.reshape(cond, ()) if t.shape != () else cond
    if t.dtype != "bool":
        flag = op.not_equal(flag, Constant(np.zeros((), t.dtype)))
    if len(then) == 1:
        return [If(flag, then[0], other[0])]
    both = If(flag, Tuple(tuple(then)), Tuple(tuple(other)))
    return [TupleGetItem(both, i) for i in range(len(then))]


MAX_UNROLL = 4096  # steps a Loop may unroll to (each one is a copy of its body)


@converter("Loop")
def _loop(n: Node) -> list[Expr]:
    """Unrolled when the trip count and every step's condition are known at import
    (constants, or computed from shapes); otherwise a loop function (`Loop=1`, see
    `loop_function`), which needs the body to keep its values' shapes and to have no
    scan outputs (their length would depend on data)."""
    body = n.attr("body")
    carried = [n.x(i) for i in range(2, len(n.proto.input))]
    n_scan = len(body.output) - 1 - len(carried)
    if n_scan:  # stacked outputs need a static trip count (the ONNX backend specialises)
        n.const(0)
        n.const(1)
    unrolled = _unroll(n, body, carried, n_scan)
    if unrolled is not None:
        return unrolled
    if n_scan:
        raise FrontendError(
            "the loop's condition depends on data and it has scan outputs, whose length "
            "would too: shapes must be static"
        )
    return loop_function(n, body, carried)


def _unroll(n: Node, body: Any, carried: list[Expr], n_scan: int) -> list[Expr] | None:
    """The loop's results with its body copied once per step, or None when a trip count
    or a condition depends on data (or there are too many steps and no scan outputs)."""
    limit, going_in = n.input(0), n.input(1)
    if not isinstance(limit, Constant | None) or not isinstance(going_in, Constant | None):
        return None
    steps = MAX_UNROLL + 1 if limit is None else int(np.asarray(limit.data).reshape(-1)[0])
    going = True if going_in is None else bool(np.asarray(going_in.data).reshape(-1)[0])
    names = [i.name for i in body.input]
    n_carried = len(carried)
    produced: list[list[Expr]] = [[] for _ in range(n_scan)]
    step = 0
    while going and step < steps:
        if step == MAX_UNROLL:
            if n_scan == 0:
                return None
            raise FrontendError(f"the loop runs more than {MAX_UNROLL} steps: too many to unroll")
        bindings: dict[str, Expr] = {
            names[0]: Constant(np.asarray(step, np.int64)),
            names[1]: Constant(np.asarray(True)),
        }
        bindings.update(zip(names[2:], carried, strict=True))
        outs = n.importer.run_graph(body, bindings)
        flag, carried = outs[0], outs[1 : 1 + n_carried]
        for j, value in enumerate(outs[1 + n_carried :]):
            produced[j].append(value)
        if not isinstance(flag, Constant):
            return None
        going = bool(np.asarray(flag.data).reshape(-1)[0])
        step += 1
    results = list(carried)
    for items in produced:
        if not items:
            raise FrontendError("a loop that runs no step has no scan outputs to stack")
        results.append(op.concatenate(*(op.expand_dims(e, axis=0) for e in items), axis=0))
    return results


def loop_function(n: Node, body: Any, carried: list[Expr]) -> list[Expr]:
    """The loop as a call of a loop function (egraph_ir/loops.py) over its trip count,
    condition, carried values and the outside values its body reads."""
    step, going = Var("i", TensorType((), "int64")), Var("cond", TensorType((), "bool"))
    state = [Var(f"v{k}", infer_new_nodes(c).checked_type) for k, c in enumerate(carried)]
    names = [i.name for i in body.input]
    bindings: dict[str, Expr] = {names[0]: step, names[1]: going}
    bindings.update(zip(names[2:], state, strict=True))
    outs = [infer_new_nodes(o) for o in n.importer.run_graph(body, bindings)]
    results = [_flag(outs[0]), *outs[1:]]
    for k, (before, after) in enumerate(zip(state, outs[1:], strict=True)):
        if before.type_annotation != after.checked_type:
            raise FrontendError(
                f"loop-carried value {k} ('{names[2 + k]}') changes from "
                f"{before.type_annotation} to {after.checked_type}: shapes must be static"
            )
    inner: set[Expr] = {step, going, *state}
    outside, reads, closed = _close(results, inner)
    fn = Function((step, going, *state, *outside), Tuple(tuple(closed)))
    fn = fn.with_attr(LOOP_ATTR, 1)
    limit = n.input(0)
    trips = _count(limit) if limit is not None else Constant(np.asarray(2**63 - 1, np.int64))
    start = _flag(n.x(1)) if n.input(1) is not None else Constant(np.asarray(True))
    call = Call(fn, (trips, start, *carried, *reads))
    return [TupleGetItem(call, 1 + k) for k in range(len(carried))]


def _count(e: Expr) -> Expr:
    t = infer_new_nodes(e).checked_type
    flat = op.reshape(e, ()) if getattr(t, "shape", ()) != () else e
    return flat if getattr(t, "dtype", "") == "int64" else op.cast(flat, dtype="int64")


def _flag(e: Expr) -> Expr:
    t = infer_new_nodes(e).checked_type
    if not isinstance(t, TensorType) or t.size != 1:
        raise FrontendError(f"the loop's condition must hold one value, got {t}")
    flat = op.reshape(e, ()) if t.shape != () else e
    if t.dtype != "bool":
        flat = op.not_equal(flat, Constant(np.zeros((), t.dtype)))
    return flat


def _close(results: list[Expr], inner: set[Expr]) -> tuple[list[Var], list[Expr], list[Expr]]:
    """The body made closed: each outside value it reads (one that depends on no loop
    variable, constants and function literals aside) becomes a parameter. Returns those
    parameters, the values to pass for them and the results rewritten."""
    depends: set[Expr] = set(inner)
    for x in post_order(Tuple(tuple(results)), into_functions=False):
        if x not in depends and any(k in depends for k in _operands(x)):
            depends.add(x)
    params: list[Var] = []
    reads: list[Expr] = []
    memo: dict[Expr, Expr] = {v: v for v in inner}

    def outside(x: Expr) -> Expr:
        if x in memo:
            return memo[x]
        if isinstance(x, Constant | Function) or x in inner:
            memo[x] = x
        else:
            memo[x] = Var(f"outside{len(params)}", infer_new_nodes(x).checked_type)
            params.append(memo[x])  # type: ignore[arg-type]
            reads.append(x)
        return memo[x]

    for x in post_order(
        Tuple(tuple(results)), into_functions=False, stop=lambda y: y not in depends
    ):
        if x in depends and x not in inner:
            for k in _operands(x):
                if k not in depends:
                    outside(k)
            memo[x] = rebuild(x, memo)
    closed = [memo[r] if r in depends else outside(r) for r in results]
    return params, reads, closed


def _operands(x: Expr) -> tuple[Expr, ...]:
    """A node's children, a function literal being a leaf (a nested loop is closed)."""
    return () if isinstance(x, Function) else children(x)


def loop_globals(main: Function) -> dict[str, Function]:
    """The module's functions: main, and each loop function its calls (or a loop's) name
    as a literal made a global (`onnx_loop_<k>`) called by name, as passes expect."""
    functions: dict[str, Function] = {}
    names: dict[Function, GlobalVar] = {}
    pending: list[tuple[str, Function]] = [("main", main)]
    while pending:
        name, fn = pending.pop()
        memo: dict[Expr, Expr] = {}
        for x in post_order(fn.body, into_functions=False):
            callee = x.op if isinstance(x, Call) else None
            if isinstance(callee, Function) and is_loop(callee):
                if callee not in names:
                    names[callee] = GlobalVar(f"onnx_loop_{len(names)}")
                    pending.append((names[callee].name_hint, callee))
                memo[callee] = names[callee]  # the literal was visited before its call
            leaf = isinstance(x, Var | Constant | Function | GlobalVar)
            memo[x] = x if leaf else rebuild(x, memo)
        functions[name] = Function(fn.params, memo[fn.body], fn.ret_type, fn.attrs, fn.span)
    return functions
