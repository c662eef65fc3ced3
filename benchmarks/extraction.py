"""Benchmark: DAG cost and time of each extractor on saturated e-graphs.

Cases: the built-in models after the algebraic and layout rules, and generated programs
whose e-graphs commutativity/associativity grow to about 1k-20k e-nodes. For each, the
greedy (tree cost), greedy-dag and ILP extractors under the `balanced` cost model, with the
ILP's status (optimal / feasible at its time limit) and gap. Not a test: read the ratios.

    .venv/bin/python benchmarks/extraction.py [--ilp-time 10] [--sizes 1000,5000,20000]
"""

from __future__ import annotations

import argparse
import random
import time

import egraph_ir as ir
import rules
from egraph_ir import models, op
from egraph_ir.egraph import Limits, extract, get_cost_model
from egraph_ir.egraph.encode import encode
from egraph_ir.egraph.graph import TensorEGraph
from egraph_ir.egraph.saturate import saturate

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


def saturated(fn: ir.Function, rewrites, nodes: int):
    g = TensorEGraph()
    root = encode(g, fn.body)
    g.flush()
    report = saturate(g, rewrites, Limits(iterations=50, nodes=nodes, seconds=30.0))
    snap = g.snapshot()
    return g, snap, snap.handle_class[root], report


def run_case(label: str, fn: ir.Function, rewrites, nodes: int, ilp_time: float) -> None:
    g, snap, root, report = saturated(fn, rewrites, nodes)
    model = get_cost_model("balanced")
    row = [f"{label:<24}", f"{snap.num_enodes:>7}", f"{report.stop_reason.value:<16}"]
    costs = {}
    for extractor in ("greedy", "greedy-dag", "ilp"):
        t0 = time.perf_counter()
        result = extract(g, snap, root, extractor, model, ilp_time)
        seconds = time.perf_counter() - t0
        costs[extractor] = result.cost
        note = ""
        if extractor == "ilp":
            gap = f", gap {result.gap:.2%}" if result.gap is not None else ""
            note = f" [{result.status}{gap}, from {result.extractor}]"
        row.append(f"{extractor} {result.cost:.4g} in {seconds:.2f}s{note}")
    assert costs["ilp"] <= costs["greedy"] * (1 + 1e-12), "ILP worse than greedy"
    saving = 1 - costs["ilp"] / costs["greedy"] if costs["greedy"] else 0.0
    print("  ".join(row) + f"  ilp saves {saving:.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ilp-time", type=float, default=10.0)
    parser.add_argument("--sizes", default="1000,5000,20000", help="e-node limits")
    args = parser.parse_args()
    print(f"{'case':<24} {'e-nodes':>7} {'stop':<16} costs (balanced model) and times")
    standard = (rules.builtin("algebraic") + rules.builtin("layout")).enabled(fast_math=True)
    for name in models.NAMES:
        fn = ir.infer_type(models.get(name))["main"]
        run_case(f"model {name}", fn, standard.rewrites(), 100_000, args.ilp_time)
    for size in (int(s) for s in args.sizes.split(",")):
        run_case(f"generated ~{size}", generated(60), AC.rewrites(), size, args.ilp_time)


if __name__ == "__main__":
    main()
