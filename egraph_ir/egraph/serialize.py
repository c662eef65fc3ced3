"""E-graphs in extraction-gym's serialized JSON (the `egraph-serialize` format).

    {"nodes": {"<node id>": {"op": "...", "children": ["<node id>", ...],
                             "eclass": "<class id>", "cost": 1.0}, ...},
     "root_eclasses": ["<class id>", ...]}

A child is named by a node id and stands for that node's e-class. Reading one gives a
`SerializedEGraph` that every extractor here runs on (`extract_serialized`), so the public
extraction data sets (extraction-gym, SmoothE, e-boost) can be compared with ours; our
saturated e-graphs are written in the same format by `serialize` (costs under a cost model).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CompilerError
from .extract import ExtractionResult, extract
from .graph import ENode, Snapshot, Value

ROOT = "<roots>"  # the class a file with several roots gets: one node needing them all


@dataclass
class SerializedEGraph:
    """Nodes (ENode: ctor = op, children = class ids, literals = (node id,)) and costs."""

    snapshot: Snapshot
    costs: dict[ENode, float]
    roots: list[str]

    @property
    def root(self) -> str:
        return self.roots[0] if len(self.roots) == 1 else ROOT

    def to_json(self) -> dict[str, Any]:
        first = {c: ns[0].literals[0] for c, ns in self.snapshot.by_class.items()}
        nodes = {}
        for n in self.snapshot.nodes:
            if n.eclass == ROOT:
                continue
            nodes[n.literals[0]] = {
                "op": n.ctor,
                "children": [first[k] for k in n.children],
                "eclass": n.eclass,
                "cost": self.costs[n],
            }
        return {"nodes": nodes, "root_eclasses": list(self.roots)}


def from_json(data: Mapping[str, Any]) -> SerializedEGraph:
    """Read the format above (a dict, as json.load gives it); clear errors for bad input."""
    try:
        raw = data["nodes"]
        roots = [str(r) for r in data["root_eclasses"]]
        class_of = {str(i): str(d["eclass"]) for i, d in raw.items()}
        nodes, costs = [], {}
        for i, d in raw.items():
            kids = tuple(class_of[str(k)] for k in d.get("children", ()))
            n = ENode(str(d["op"]), kids, (str(i),), class_of[str(i)])
            nodes.append(n)
            costs[n] = float(d.get("cost", 1.0))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CompilerError(f"not a serialized e-graph: {type(exc).__name__} {exc}") from None
    if not roots or any(r not in set(class_of.values()) for r in roots):
        raise CompilerError("a serialized e-graph needs root_eclasses that name its classes")
    if len(roots) > 1:
        top = ENode(ROOT, tuple(roots), (ROOT,), ROOT)
        nodes.append(top)
        costs[top] = 0.0
    return SerializedEGraph(Snapshot(nodes, {}), costs, roots)


def load(path: str | Path) -> SerializedEGraph:
    """Read a serialized e-graph from a `.json` file or a gzip-compressed `.json.gz` one."""
    return from_json(read_json(path))


def read_json(path: str | Path) -> Any:
    """The JSON of a `.json` or `.json.gz` file, as json.load gives it."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def serialize(snap: Snapshot, own: Mapping[ENode, float], root: Value) -> SerializedEGraph:
    """One of our snapshots (costs from a CostTable) in the serialized form."""
    cls = {c: f"c{k}" for k, c in enumerate(sorted(snap.by_class, key=str))}
    nodes, costs = [], {}
    for k, n in enumerate(snap.nodes):
        lits = ",".join(str(x) for x in n.literals)
        op = f"{n.ctor}[{lits}]" if lits else n.ctor
        m = ENode(op, tuple(cls[c] for c in n.children), (f"n{k}",), cls[n.eclass])
        nodes.append(m)
        costs[m] = float(own[n])
    return SerializedEGraph(Snapshot(nodes, {}), costs, [cls[root]])


def extract_serialized(
    graph: SerializedEGraph, extractor: str = "auto", time_limit: float = 10.0
) -> ExtractionResult:
    """Run one of our extractors on a serialized e-graph with its own costs."""
    return extract(
        None, graph.snapshot, graph.root, extractor, time_limit=time_limit, costs=graph.costs
    )


__all__ = ["SerializedEGraph", "extract_serialized", "from_json", "load", "read_json", "serialize"]
