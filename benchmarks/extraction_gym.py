"""Benchmark: our extractors on the public extraction benchmark (extraction-gym's e-graphs).

Reads every `*.json` / `*.json.gz` e-graph under DIR (default `../shared/extraction-gym`,
with its `best_known.csv`), runs each extractor with a time limit in a child process (a hang
is reported, not waited for), re-checks every returned choice against the raw JSON (each
chosen node in its class, every needed class chosen, no cycle from the roots, the DAG cost
recomputed from the file's costs), and prints one line per file and a table per family:
matches with the best known cost, geometric mean of cost / best known (best / cost for
negative costs, so above 1 is worse either way), proofs, false `optimal` labels, the
slowest run against its limit. Not a test: read the table.

    .venv/bin/python benchmarks/extraction_gym.py [DIR] [--extractors auto,greedy-dag]
        [--limit 10] [--only flexc] [--json results.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import multiprocessing as mp
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from egraph_ir.egraph.serialize import read_json

GYM = Path(__file__).resolve().parents[1].parent / "shared" / "extraction-gym"
TOLERANCE = 1e-6  # relative, as best_known.csv asks (beside the rounding of its digits)
SLACK = 0.10  # a limit of T seconds is kept when a run returns within T * (1 + SLACK) + 0.2 s


def check(data: dict[str, Any], chosen: dict[str, str]) -> float:
    """The DAG cost of a choice (class id -> node id), checked against the raw file
    without our data structures: raises ValueError on an invalid choice."""
    nodes = data["nodes"]
    cost, done, on_path = 0.0, set(), set()
    for root in data["root_eclasses"]:
        stack: list[tuple[str, bool]] = [(str(root), False)]
        while stack:
            c, leaving = stack.pop()
            if leaving:
                on_path.discard(c)
                done.add(c)
                continue
            if c in done:
                continue
            node_id = chosen.get(c)
            if node_id is None or str(nodes[node_id]["eclass"]) != c:
                raise ValueError(f"class {c} has no chosen node of its own")
            on_path.add(c)
            stack.append((c, True))
            cost += float(nodes[node_id].get("cost", 1.0))
            for kid in nodes[node_id].get("children", ()):
                k = str(nodes[str(kid)]["eclass"])
                if k in on_path:
                    raise ValueError(f"the choice closes a cycle through class {k}")
                if k not in done:
                    stack.append((k, False))
    return cost


def _child(path: str, extractor: str, limit: float, out: Any) -> None:
    from egraph_ir.egraph.serialize import ROOT, extract_serialized, from_json

    data = read_json(path)
    graph = from_json(data)
    t0 = time.perf_counter()
    result = extract_serialized(graph, extractor, limit)
    seconds = time.perf_counter() - t0
    chosen = {c: n.literals[0] for c, n in result.choice.items() if c != ROOT}
    out.send(
        {
            "cost": result.cost,
            "status": result.status,
            "gap": result.gap,
            "bound": result.lower_bound,
            "budget": result.time_limit,
            "used": result.extractor,
            "notes": list(result.notes),
            "seconds": seconds,
            "chosen": chosen,
        }
    )


def run_one(path: Path, extractor: str, limit: float) -> dict[str, Any]:
    """One extraction in a child process; a run past 3x its limit + 30 s is killed."""
    receive, send = mp.Pipe(duplex=False)
    proc = mp.get_context("fork").Process(target=_child, args=(str(path), extractor, limit, send))
    proc.start()
    send.close()
    ready = receive.poll(3 * limit + 30)
    if not ready:
        proc.kill()
        proc.join()
        return {"error": f"no answer after {3 * limit + 30:.0f} s (killed)"}
    try:
        answer = receive.recv()
    except EOFError:
        answer = {"error": f"the child died (exit code {proc.exitcode})"}
    proc.join()
    return answer


def rounding(text: str) -> float:
    """Half a unit in the last digit a cost is written with (4.41599 -> 5e-6)."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0**-decimals


def matches(row: dict[str, Any]) -> bool:
    """Whether a checked cost equals the best known (within tolerance and its rounding)."""
    slack = TOLERANCE * abs(row["best"]) + row["rounding"]
    return abs(row["checked"] - row["best"]) <= slack


def excess(cost: float, best: float) -> float:
    """How much worse than the best known (1.0: as good)."""
    if best > 0:
        return cost / best
    if best < 0:
        return best / cost if cost < 0 else math.inf
    return 1.0 if cost <= 0 else math.inf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dir", nargs="?", type=Path, default=GYM)
    parser.add_argument("--extractors", default="auto,greedy-dag")
    parser.add_argument("--limit", type=float, default=10.0, help="time_limit of extract()")
    parser.add_argument("--only", default="", help="files whose path contains this")
    parser.add_argument("--json", type=Path, help="write every result here")
    args = parser.parse_args()
    if not args.dir.exists():
        print(f"no benchmark folder at {args.dir}: nothing to do")
        return
    best: dict[str, tuple[float, bool]] = {}
    table = args.dir / "best_known.csv"
    if table.exists():
        with open(table) as f:
            for row in csv.DictReader(f):
                text = row["best_known_cost"]
                best[row["file"]] = (float(text), row["proven_optimal"] == "yes", rounding(text))
    files = sorted(p for p in args.dir.rglob("*.json*") if args.only in str(p))
    results: list[dict[str, Any]] = []
    for path in files:
        name = str(path.relative_to(args.dir))
        data = read_json(path)
        for extractor in args.extractors.split(","):
            answer = run_one(path, extractor, args.limit)
            row = {"file": name, "extractor": extractor, "enodes": len(data["nodes"]), **answer}
            row["best"], _, row["rounding"] = best.get(name, (math.nan, False, 0.0))
            if "error" not in answer:
                try:
                    row["checked"] = check(data, answer["chosen"])
                except (ValueError, KeyError) as exc:
                    row["error"] = f"invalid choice: {exc}"
            row.pop("chosen", None)
            results.append(row)
            print(line(row), flush=True)
    summary(results)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


def line(row: dict[str, Any]) -> str:
    head = f"{row['file'][:46]:<46} {row['extractor']:<10} {row['enodes']:>6}"
    if "error" in row:
        return f"{head}  ERROR {row['error']}"
    ratio = excess(row["checked"], row["best"])
    late = " LATE" if row["seconds"] > row["budget"] * (1 + SLACK) + 0.2 else ""
    notes = f"  [{'; '.join(row['notes'])}]" if row["notes"] else ""
    return (
        f"{head} {row['checked']:>11.6g} x{ratio:6.4f} {row['status']:<9} "
        f"{row['seconds']:6.2f}s/{row['budget']:<4.3g}{late}{notes}"
    )


def summary(results: list[dict[str, Any]]) -> None:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in results:
        groups[(row["file"].split("/")[0], row["extractor"])].append(row)
    print()
    print(
        f"{'family':<15} {'extractor':<10} {'files':>5} {'= best':>6} {'geomean':>8} "
        f"{'proved':>6} {'false opt':>9} {'errors':>6} {'late':>4} {'slowest':>8}"
    )
    for (family, extractor), rows in sorted(groups.items()):
        ok = [r for r in rows if "error" not in r]
        ratios = [excess(r["checked"], r["best"]) for r in ok]
        same = sum(matches(r) for r in ok)
        finite = [x for x in ratios if math.isfinite(x)]
        geo = math.exp(sum(math.log(x) for x in finite) / len(finite)) if finite else math.nan
        proved = sum(r["status"] == "optimal" for r in ok)
        false_opt = sum(
            r["status"] == "optimal" and not matches(r) and excess(r["checked"], r["best"]) > 1
            for r in ok
        )
        late = sum(r["seconds"] > r["budget"] * (1 + SLACK) + 0.2 for r in ok)
        slowest = max((r["seconds"] for r in ok), default=0.0)
        print(
            f"{family:<15} {extractor:<10} {len(rows):>5} {same:>6} {geo:>8.4f} {proved:>6} "
            f"{false_opt:>9} {len(rows) - len(ok):>6} {late:>4} {slowest:>7.2f}s"
        )


if __name__ == "__main__":
    main()
