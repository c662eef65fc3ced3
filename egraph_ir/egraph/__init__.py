"""The e-graph bridge: the only code that imports egglog.

`optimize(fn, rewrites, limits)` encodes the dataflow of a type-checked function, runs
equality saturation with the rewrites, extracts the cheapest program and rebuilds IR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..expr import Function
from ..infer import infer_type
from .cost import CostModel, calibrate, get_cost_model, load_machine
from .dot import egraph_to_dot
from .encode import encode
from .extract import EXTRACTORS, ExtractionResult, extract, translate
from .graph import Snapshot, TensorEGraph
from .kernel_cost import KernelCost
from .pattern import AttrVar, Match, PCall, PGet, PLit, PVar, Rewrite
from .saturate import Limits, SaturationReport, Stop, StopReason, saturate
from .spans import class_spans

OBSERVERS: list[Callable[[TensorEGraph, Snapshot, object, CostModel], None]] = []
"""Called with (e-graph, snapshot, root class, cost model) after every saturation: the
extraction benchmark collects the e-graphs the standard pipeline makes this way."""


@dataclass
class OptimizeResult:
    function: Function
    report: SaturationReport
    cost_before: float  # DAG cost of the input program under the cost model
    cost_after: float  # DAG cost of the extracted program
    snapshot: Snapshot | None = None  # the saturated e-graph (for pictures and reports)
    root_class: object = None
    extraction: ExtractionResult | None = None


def optimize(
    fn: Function,
    rewrites: list[Rewrite],
    limits: Limits | None = None,
    cost_model: str | CostModel = "balanced",
    fold_constants: bool = True,
    extractor: str = "auto",
    extract_time_limit: float = 2.0,
) -> OptimizeResult:
    """Saturate fn's body with rewrites and return the cheapest equivalent function (never
    costlier than fn itself: the input program is one of the extraction's candidates)."""
    model = get_cost_model(cost_model)
    infer_type(fn)
    g = TensorEGraph()
    root = encode(g, fn.body)
    g.flush()
    snap0 = g.snapshot()
    start = extract(g, snap0, snap0.handle_class[root], "greedy", model)
    report = saturate(g, rewrites, limits, fold_constants)
    unchanged = not report.applied and not report.folded
    snap = snap0 if unchanged else g.snapshot()  # nothing fired: the e-graph is the input's
    root_class = snap.handle_class[root]
    for observe in OBSERVERS:
        observe(g, snap, root_class, model)
    if unchanged and g.encoded == snap0.num_enodes:  # not even two equal nodes: fn itself
        return OptimizeResult(fn, report, start.cost, start.cost, snap, root_class, start)
    if unchanged:
        result = start  # the input, hash-consed: common subexpressions already merged
    else:
        given = translate(start.choice, snap0, snap)
        seeds = {"input": given} if given is not None else {}
        result = extract(g, snap, root_class, extractor, model, extract_time_limit, seeds)
    spans = class_spans(g, snap, result.choice, root_class) if g.spans else None
    out = Function(fn.params, result.to_ir(g, spans), fn.ret_type, fn.attrs, fn.span)
    infer_type(out)
    return OptimizeResult(out, report, start.cost, result.cost, snap, root_class, result)


__all__ = [
    "EXTRACTORS",
    "KernelCost",
    "CostModel",
    "ExtractionResult",
    "calibrate",
    "extract",
    "get_cost_model",
    "load_machine",
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
    "Stop",
    "StopReason",
    "egraph_to_dot",
    "optimize",
]
