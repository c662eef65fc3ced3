"""Benchmark: DAG cost, proven gap and time of each extractor on saturated e-graphs.

Cases:
- every e-graph the standard pipeline saturates (the EqSat passes of `codegen.build`) on
  the built-in models and, when ../shared/models/real is present, the real models;
- generated programs whose e-graphs commutativity/associativity grow to ~1k-20k e-nodes;
- with `--gym DIR`, every extraction-gym style `*.json` e-graph under DIR (their public
  data sets), extracted with their own costs; `--write DIR` saves ours in that format.

For each: greedy (tree cost), greedy-dag, the ILP (status, proven gap) and the default
(`auto`), with times. Not a test: read the table.

    .venv/bin/python benchmarks/extraction.py [--ilp-time 10] [--sizes 1000,5000,20000]
        [--gym DIR] [--write DIR] [--min-nodes 50]
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import time
from pathlib import Path

import egraph_ir as ir
import egraph_ir.egraph as eg
import passmgr as pm
import rules
from egraph_ir import models, op
from egraph_ir.egraph import Limits, get_cost_model
from egraph_ir.egraph.encode import encode
from egraph_ir.egraph.extract import CostTable
from egraph_ir.egraph.graph import TensorEGraph
from egraph_ir.egraph.saturate import saturate
from egraph_ir.egraph.serialize import SerializedEGraph, extract_serialized, load, serialize

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "real"
EXTRACTORS = ("greedy", "greedy-dag", "ilp", "auto")

AC = rules.parse("""
rule add-comm [t]
    add(?a, ?b) => add(?b, ?a)
rule mul-comm [t]
    multiply(?a, ?b) => multiply(?b, ?a)
rule add-assoc [t]
    add(add(?a, ?b), ?c) <=> add(?a, add(?b, ?c))
rule mul-assoc [t]
    multiply(multiply(?a, ?b), ?c) <=> multiply(?a, multiply(?b, ?c))
rule distribute [t]
    multiply(?a, add(?b, ?c)) <=> add(multiply(?a, ?b), multiply(?a, ?c))
""")


def generated(n: int, seed: int = 0) -> ir.Function:
    """A random DAG of adds and multiplies with plenty of sharing."""
    rng = random.Random(seed)
    xs = [ir.var(f"x{i}", shape=(64,)) for i in range(8)]
    values: list[ir.Expr] = list(xs)
    for _ in range(n):
        a, b = rng.choice(values[-12:]), rng.choice(values[-30:])
        values.append(rng.choice([op.add, op.multiply])(a, b))
    return ir.infer_type(ir.Function(xs, values[-1]))


def saturated(fn: ir.Function, rewrites, nodes: int) -> SerializedEGraph:
    g = TensorEGraph()
    root = encode(g, fn.body)
    g.flush()
    saturate(g, rewrites, Limits(iterations=50, nodes=nodes, seconds=30.0))
    snap = g.snapshot()
    table = CostTable(g, snap, get_cost_model("balanced"))
    return serialize(snap, table.own, snap.handle_class[root])


def pipeline_egraphs(mod: ir.IRModule, min_nodes: int) -> list[SerializedEGraph]:
    """The e-graphs the standard pipeline saturates on mod (at least min_nodes e-nodes)."""
    found: list[SerializedEGraph] = []

    def keep(g, snap, root, model) -> None:
        if snap.num_enodes >= min_nodes:
            found.append(serialize(snap, CostTable(g, snap, model).own, root))

    eg.OBSERVERS.append(keep)
    try:
        with pm.PassContext(opt_level=3):
            importlib.import_module("codegen.build").optimise(mod, None)
    finally:
        eg.OBSERVERS.remove(keep)
    return found


def run_case(label: str, graph: SerializedEGraph, ilp_time: float, write: Path | None) -> None:
    if write is not None:
        write.mkdir(parents=True, exist_ok=True)
        name = label.replace(" ", "_").replace("~", "").replace("/", "_")
        (write / f"{name}.json").write_text(json.dumps(graph.to_json()))
    size = graph.snapshot.num_enodes
    cells = [f"{label:<28}", f"{size:>7}"]
    costs = {}
    for extractor in EXTRACTORS:
        t0 = time.perf_counter()
        result = extract_serialized(graph, extractor, ilp_time)
        seconds = time.perf_counter() - t0
        costs[extractor] = result.cost
        note = ""
        if extractor in ("ilp", "auto") and result.gap is not None:
            note = f" gap {result.gap:.1%}"
        cells.append(f"{result.cost:>11.5g} {seconds:6.2f}s{note:<11}")
    best = min(costs.values())
    off = (costs["auto"] - best) / best if best else 0.0
    print("  ".join(cells) + f"  auto +{off:.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ilp-time", type=float, default=10.0)
    parser.add_argument("--sizes", default="1000,5000,20000", help="e-node limits")
    parser.add_argument("--gym", type=Path, help="a folder of serialized e-graphs (*.json)")
    parser.add_argument("--write", type=Path, help="save every case here as JSON")
    parser.add_argument("--min-nodes", type=int, default=50, help="smaller e-graphs skipped")
    args = parser.parse_args()
    head = "".join(f"  {e + ' cost, time':<30}" for e in EXTRACTORS)
    print(f"{'case':<28}  {'e-nodes':>7}{head}")
    cases: list[tuple[str, SerializedEGraph]] = []
    for name in models.NAMES:
        for k, graph in enumerate(pipeline_egraphs(models.get(name), args.min_nodes)):
            cases.append((f"pipeline {name} #{k}", graph))
    if REAL.exists():
        from egraph_ir.frontend import from_onnx

        for path in sorted(REAL.glob("*.onnx")):
            for k, graph in enumerate(pipeline_egraphs(from_onnx(path), args.min_nodes)):
                cases.append((f"pipeline {path.stem} #{k}", graph))
    for size in (int(s) for s in args.sizes.split(",") if s):
        cases.append((f"generated ~{size}", saturated(generated(60), AC.rewrites(), size)))
    if args.gym is not None:
        for path in sorted(args.gym.rglob("*.json")):
            cases.append((f"gym {path.stem}", load(path)))
    for label, graph in cases:
        run_case(label, graph, args.ilp_time, args.write)


if __name__ == "__main__":
    main()
