"""ONNX converters for ops with subgraphs: Scan (unrolled over its static sequence length)
and Loop (unrolled over a trip count and conditions known at import), each step's body
converted with that step's values; and If, which becomes the IR's If (or the taken branch
when the condition is a constant)."""

from __future__ import annotations

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr, If, Tuple, TupleGetItem
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
    """Unrolled: the trip count and the condition must be known at import (constants, or
    computed from shapes; the ONNX backend specialises on inputs that set them). Each
    step's condition must fold to a constant too; a false one ends the loop."""
    body = n.attr("body")
    limit = n.const(0)
    steps = MAX_UNROLL + 1 if limit is None else int(np.asarray(limit).reshape(-1)[0])
    going = True if n.input(1) is None else bool(np.asarray(n.const(1)).reshape(-1)[0])
    carried = [n.x(i) for i in range(2, len(n.proto.input))]
    names = [i.name for i in body.input]
    n_carried = len(carried)
    produced: list[list[Expr]] = [[] for _ in range(len(body.output) - 1 - n_carried)]
    step = 0
    while going and step < steps:
        if step == MAX_UNROLL:
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
            raise FrontendError("the loop's condition depends on data: it cannot be unrolled")
        going = bool(np.asarray(flag.data).reshape(-1)[0])
        step += 1
    results = list(carried)
    for items in produced:
        if not items:
            raise FrontendError("a loop that runs no step has no scan outputs to stack")
        results.append(op.concatenate(*(op.expand_dims(e, axis=0) for e in items), axis=0))
    return results
