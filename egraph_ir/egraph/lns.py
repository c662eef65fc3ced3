"""Large-neighbourhood search for DAG extraction: improve a known program by solving the
integer program exactly on a small e-graph around it, again and again.

The whole e-graph's integer program has a weak relaxation (a class may split its weight
over many nodes, so shared sub-terms look almost free) and stalls past a few thousand
e-nodes; around one program it is small and solves in milliseconds. Neighbourhoods of the
current program P, tried from the narrowest:

1. P's classes with every node whose children are in P or one step out (the classes P's
   classes' nodes need), and those one-step classes with their nodes built from P alone;
2. the same, the one-step classes' nodes built from P and the one-step classes.

P itself lies in every neighbourhood, so a solve is never worse. An improvement starts
again from the narrowest; the search stops when the widest finds nothing better, a solve
is not proven optimal, a neighbourhood exceeds MAX_NODES e-nodes or WHOLE_SHARE of the
e-graph (the whole integer program, with its implied-class rows, is then the better use of
the time: on the 1k-node generated AC e-graph such a solve spent 5 of the ILP's 10 s), or
time runs out.
"""

from __future__ import annotations

import time

from .graph import ENode, Value
from .ilp import MIN_SOLVE_SECONDS, reachable_classes, reachable_size, solve, total_cost

LEVELS = 6
MAX_NODES = 20_000  # e-nodes in a neighbourhood worth one exact solve
WHOLE_SHARE = 0.5  # of the e-graph's reachable e-nodes, above which a neighbourhood is no search


def improve(
    by_class: dict[Value, list[ENode]],
    own: dict[ENode, float],
    root: Value,
    start: dict[Value, ENode],
    time_limit: float,
    whole_share: float = WHOLE_SHARE,
) -> tuple[dict[Value, ENode], int]:
    """A choice no costlier than `start` (a valid acyclic one), and the number of solves.
    Neighbourhoods above `whole_share` of the reachable e-graph are not searched."""
    deadline = time.perf_counter() + time_limit
    best, best_cost = start, total_cost(start, own, root)
    whole = reachable_size(by_class, root)
    level, solves = 1, 0
    while level <= LEVELS:
        remaining = deadline - time.perf_counter()
        if remaining < MIN_SOLVE_SECONDS:
            break
        around = _around(by_class, best, root, level)
        size = sum(len(nodes) for nodes in around.values())
        if size > MAX_NODES or size > whole_share * whole:
            break  # too big to solve around, or hardly smaller than the whole e-graph
        outcome = solve(around, own, root, best, remaining, implied=False)
        solves += 1
        cost = total_cost(outcome.choice, own, root)
        if cost < best_cost * (1 - 1e-12):
            best, best_cost, level = {**best, **outcome.choice}, cost, 1
            continue
        if outcome.status != "optimal":
            break  # out of time inside this neighbourhood: a wider one would not finish
        level += 1
    return best, solves


def _around(
    by_class: dict[Value, list[ENode]], choice: dict[Value, ENode], root: Value, level: int
) -> dict[Value, list[ENode]]:
    """The e-graph around the chosen program (see the module docstring)."""
    program = set(reachable_classes(choice, root))
    rings = [program]  # classes one more step out from the program each
    for _ in range(max(1, level - 1)):
        seen = set().union(*rings)
        rings.append({k for c in rings[-1] for n in by_class[c] for k in n.children} - seen)
    inner = set().union(*rings)
    if level >= 3:  # every class within level - 1 steps, with every node inside them
        return {c: [n for n in by_class.get(c, ()) if inner.issuperset(n.children)] for c in inner}
    step = rings[1]
    sub = {c: [n for n in by_class[c] if inner.issuperset(n.children)] for c in program}
    allowed = program if level == 1 else inner
    for k in step:
        sub[k] = [n for n in by_class.get(k, ()) if allowed.issuperset(n.children)]
    return sub
