"""The e-graph bridge: the only code that imports egglog.

`optimize(fn, rewrites, limits)` encodes the dataflow of a type-checked function, runs
equality saturation with the rewrites, extracts the cheapest program and rebuilds IR.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..expr import Function
from ..infer import infer_type
from .dot import egraph_to_dot
from .encode import encode
from .extract import Extraction, NodeCost, default_node_cost
from .graph import Snapshot, TensorEGraph
from .pattern import AttrVar, Match, PCall, PGet, PLit, PVar, Rewrite
from .saturate import Limits, SaturationReport, StopReason, saturate


@dataclass
class OptimizeResult:
    function: Function
    report: SaturationReport
    cost_before: float
    cost_after: float
    snapshot: Snapshot | None = None  # the saturated e-graph (for pictures and reports)
    root_class: object = None


def optimize(
    fn: Function,
    rewrites: list[Rewrite],
    limits: Limits | None = None,
    node_cost: NodeCost = default_node_cost,
    fold_constants: bool = True,
) -> OptimizeResult:
    """Saturate fn's body with rewrites and return the cheapest equivalent function."""
    infer_type(fn)
    g = TensorEGraph()
    root = encode(g, fn.body)
    g.flush()
    before = Extraction(g, g.snapshot(), node_cost)
    snap0 = g.snapshot()
    cost_before = before.cost[snap0.handle_class[root]]
    report = saturate(g, rewrites, limits, fold_constants)
    snap = g.snapshot()
    ext = Extraction(g, snap, node_cost)
    root_class = snap.handle_class[root]
    body = ext.to_ir(root_class)
    out = Function(fn.params, body, fn.ret_type, fn.attrs, fn.span)
    infer_type(out)
    return OptimizeResult(out, report, cost_before, ext.cost[root_class], snap, root_class)


__all__ = [
    "AttrVar",
    "Limits",
    "Match",
    "OptimizeResult",
    "PCall",
    "PGet",
    "PLit",
    "PVar",
    "Rewrite",
    "SaturationReport",
    "Snapshot",
    "StopReason",
    "egraph_to_dot",
    "optimize",
]
