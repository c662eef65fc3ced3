"""Placement as extraction: the program and the target of each of its calls chosen by one
integer program over an e-graph.

PlaceTargets saturates a function with rules that expose offloads (flexible matching: a
1x1 convolution is a product, see rules/builtin/offload.rules), so the e-graph holds every
form of the program those rules know. Then one integer program (HiGHS) picks one e-node
per needed e-class and a target per picked node, under place_targets' cost model (op cost
on its target, one launch and copy per value entering a target, copies of results back):

- x[n, t] binary: node n is picked and runs on target t. Leaves, tuples and fields run on
  the host; a constant is available everywhere (it is bound into the regions);
- the root class takes one node, every class at most one, and a class whose node needs
  class k makes k take one (rows summed over the class's nodes, as the extraction ILP);
- e[k, t] >= (the node of a class reading k runs on t) - (k's node runs on t), one row per
  reading class: k's value enters t, paid once however many of t's nodes read it;
- a cycle the picked nodes close is forbidden when a solution uses it, then solved again.

The integer program itself is generic (egraph_ir/egraph/labelled.py: extraction where each
picked node also takes a label); this module says what the labels and costs are.

The e-graph program prices launches per entering value and copies at `per_byte` (a
region's launch and routed link costs are not linear over e-nodes); PlaceTargets then
places the program it picks under the whole model (solve.py) and keeps it only
when that beats the input program's placement.

A rewrite is therefore kept only where a target pays for it: with no target taking the
new form, the input program costs least (ties go to fewer nodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from egraph_ir.egraph import Limits, Rewrite
from egraph_ir.egraph.encode import encode
from egraph_ir.egraph.extract import constant_of, node_ir, reachable
from egraph_ir.egraph.graph import ENode, Snapshot, TensorEGraph, Value
from egraph_ir.egraph.ilp import extractable
from egraph_ir.egraph.labelled import LabelledProblem, labelled_extraction
from egraph_ir.egraph.saturate import saturate
from egraph_ir.expr import Call, Constant, Expr, Function, Var
from egraph_ir.infer import infer_type
from egraph_ir.registry import Op
from egraph_ir.support import supports
from egraph_ir.types import Type, tensor_types

from ..regions import DEFAULT
from .model import PlacementCost

LAYOUT_FOLD_ELEMENTS = 1 << 24  # weights up to 64 MiB of float32


@dataclass
class Outcome:
    """The extracted function and the target of each of its calls."""

    function: Function
    place: dict[Expr, str]
    enodes: int  # e-nodes the integer program chose among


def place_by_extraction(
    fn: Function,
    targets: Sequence[str],
    cost: PlacementCost,
    rewrites: list[Rewrite],
    limits: Limits,
    time_limit: float,
) -> Outcome | None:
    """The cheapest (program, placement) the rewrites reach from fn, or None when the
    program found no solution in time (the caller then places fn as it is)."""
    g = TensorEGraph()
    root_handle = encode(g, fn.body)
    g.flush()
    # a rewrite's squeeze(weight) or transpose(weight) must be a constant when a target's
    # predicate asks (TVM's "constant weight" checks) and when the extractor prices it
    saturate(g, rewrites, replace(limits, fold_layout_elements=LAYOUT_FOLD_ELEMENTS))
    snap = g.snapshot()
    root = snap.handle_class[root_handle]
    classes = extractable(snap.by_class, root)  # every node kept: dominance needs one cost
    options = _options(g, snap, classes, targets, cost)
    size = {c: sum(t.nbytes for t in tensor_types(_class_type(g, snap, c))) for c in classes}
    problem = LabelledProblem(
        classes,
        options,
        root,
        entry=lambda k, t: cost.launch_of(t) + cost.per_byte * size[k],
        result=lambda t: 0.0 if t == DEFAULT else cost.per_byte * size[root],
        everywhere=frozenset(n for ns in classes.values() for n in ns if n.ctor == "Const"),
        counted=frozenset(
            n for ns in classes.values() for n in ns if n.ctor not in ("Var", "Const", "Opaque")
        ),
    )
    picked = labelled_extraction(problem, time_limit)
    if picked is None:
        return None
    built: dict[Value, Expr] = {}
    place: dict[Expr, str] = {}
    choice = {c: n for c, (n, _) in picked.items()}
    for c in reachable(choice, root):
        node, target = picked[c]
        built[c] = node_ir(g, node, [built[k] for k in node.children])
        if isinstance(built[c], Call):
            place[built[c]] = target
    out = Function(fn.params, built[root])
    infer_type(out)
    return Outcome(out, place, sum(len(nodes) for nodes in classes.values()))


def _class_type(g: TensorEGraph, snap: Snapshot, c: Value) -> Type:
    return g.handle_types[min(snap.class_handles[c])]


def _type(v: Expr) -> Type | None:
    return v.type_annotation if isinstance(v, Var) else None


def _options(
    g: TensorEGraph,
    snap: Snapshot,
    classes: dict[Value, list[ENode]],
    targets: Sequence[str],
    cost: PlacementCost,
) -> dict[ENode, dict[str, float]]:
    """Per node, {target: cost} where it may run: ops ask the cost model about a call
    of the node's op over its children's types (constants as themselves)."""
    seen: dict[tuple[object, ...], dict[str, float]] = {}
    out: dict[ENode, dict[str, float]] = {}
    for nodes in classes.values():
        for n in nodes:
            if n.ctor in ("Var", "Const", "Opaque", "Get") or n.ctor.startswith("Tup"):
                out[n] = {DEFAULT: 0.0}
                continue
            kids: list[Expr] = []
            for i, k in enumerate(n.children):
                const = constant_of(g, snap, k)
                kids.append(const or Var(f"a{i}", _class_type(g, snap, k)))
            key = (n.ctor, n.literals, *(k if isinstance(k, Constant) else _type(k) for k in kids))
            if key not in seen:
                call = node_ir(g, n, kids)
                infer_type(call)
                assert isinstance(call, Call) and isinstance(call.op, Op)
                host = cost.op(call, DEFAULT)
                choices = {DEFAULT: 0.0 if host is None else float(host)}
                for t in targets:
                    c = cost.op(call, t)
                    if c is not None and supports(t, call, strict=False):
                        choices[t] = float(c)
                seen[key] = choices
            out[n] = seen[key]
    return out
