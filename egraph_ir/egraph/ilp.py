"""DAG-optimal extraction as an integer program, built small and made acyclic lazily.

1. **Pruning.** Only classes reachable from the root count. A node that is its own child can
   never be chosen; a node with a child class left without nodes cannot either (repeated
   until nothing changes); and within a class a node is dominated by another that costs no
   more and needs a subset of its children (it can always replace it without adding cost
   or a cycle), so dominated nodes go.
   When every class is left with one node, that choice is the answer (no solver).
2. **The program.** A binary x[n] per remaining node: the root class needs a node, a class
   takes at most one node, and for each class c and each class k its nodes need, k holds a
   node when c's chosen node needs it: sum(x[k's nodes]) >= sum(x[c's nodes needing k]).
   Summing over c's nodes (valid because c takes one) makes the relaxation much tighter
   than one row per node: two alternatives sharing a child both pay for it in full.
   Nothing here forbids cycles. Implied classes tighten it: when every acyclic program
   for class c uses class d (every node of c needs a child that implies d), then
   sum(x[d's nodes]) >= sum(x[c's nodes]); a class cannot split its weight over
   alternatives to pay a fraction of what all of them need (the 1k-node generated AC
   e-graph: relaxation 5.3 -> 10.8 ops of 32, proof about 60 -> 16-39 s); at most
   IMPLIED_MAX_ROWS of them (tensat/resnet50 would have 360k, which took 4 s to build).
3. **Cycles.** Classes in a cycle of the class graph (a strong component of up to
   ORDER_MAX_COMPONENT classes) get a continuous order variable: a chosen node ranks its
   class above each child in the component (big-M by the component's size). Only those:
   most e-graphs have few such classes, and without them HiGHS's heuristics find cyclic
   "programs" only (tensat/bert stayed at the greedy 0.8247 for 30 s; with them 0.754 in
   10 s). Then lazily, as a check and for the big components: solve; follow the chosen
   nodes; for every cycle found forbid choosing all of its nodes together (sum of its x
   <= length - 1); solve again until the choice is acyclic.
   With a negative cost, each class but the root holds a node only when a chosen node
   needs it, and cycles are looked for among all chosen nodes: a negative node no program
   uses can then not lower the objective, so the chosen nodes are exactly one program.
4. **Warm start and gap.** Every solve starts from the best acyclic choice known (the
   greedy-dag answer first). The dual bound of any solve is a lower bound on the optimum,
   so a run stopped by the time limit reports the proven gap of its best acyclic choice;
   `optimal` only when the program handed back costs the proven bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..errors import CompilerError
from ..highs import Row, add_columns, add_rows, new_highs, run_until
from .cycles import cycles_of, reachable, strong_components
from .graph import ENode, Value

MIN_SOLVE_SECONDS = 0.01  # below this the solver cannot even start: keep the warm start
PRESOLVE_NONZEROS_PER_S = 10_000  # full presolve only where it surely ends in time
MIN_RUN_SECONDS = 0.1  # less left once the rows are built: loading them would overrun
DOMINANCE_MAX_CLASS = 64  # pairwise dominance checks only in classes up to this size
IMPLIED_LIMIT = 2_000_000  # set entries computed before implied-class rows are given up
IMPLIED_MAX_NODES = 5_000  # e-nodes (after pruning) up to which they are added
IMPLIED_MAX_ROWS = 50_000  # implied-class rows added at most (tensat/resnet50 has 360k)
QUICK_SHARE = 0.25  # of the time limit: a solve without implied rows comes first
ORDER_ROWS = True  # order columns and rows for the classes in cycles (see _order_rows)
ORDER_MAX_COMPONENT = 1_000  # classes in a cycle component up to which it gets them


@dataclass
class IlpOutcome:
    choice: dict[Value, ENode]
    status: str  # optimal, feasible (time limit, gap known), time-out (warm start kept)
    gap: float | None  # (cost - lower bound) / cost of the returned choice
    lower_bound: float | None
    rounds: int = 0  # solves (1 + rounds that added cycle constraints)
    nodes: int = 0  # e-nodes in the program after pruning


def extractable(by_class: dict[Value, list[ENode]], root: Value) -> dict[Value, list[ENode]]:
    """The classes reachable from root with the nodes a program could use: not their own
    child, not needing a class left without nodes. Raises when root is left empty."""
    classes: dict[Value, list[ENode]] = {}
    stack, seen = [root], {root}
    while stack:
        c = stack.pop()
        classes[c] = [n for n in by_class.get(c, ()) if c not in n.children]
        for n in classes[c]:
            for k in n.children:
                if k not in seen:
                    seen.add(k)
                    stack.append(k)
    changed = True
    while changed:  # nodes needing an empty class go, which may empty more classes
        changed = False
        for c, nodes in classes.items():
            kept = [n for n in nodes if all(classes.get(k) for k in n.children)]
            if len(kept) != len(nodes):
                classes[c], changed = kept, True
    if not classes.get(root):
        raise CompilerError("the root e-class has no acyclic program")
    return classes


def prune(
    by_class: dict[Value, list[ENode]], own: dict[ENode, float], root: Value
) -> dict[Value, list[ENode]]:
    """The classes reachable from root and the nodes that may be chosen in them. Dominance
    (a node costing more and needing more goes) holds only when no cost is negative: a
    class a node needs may then lower the program's cost."""
    classes = extractable(by_class, root)
    if all(v >= 0 for v in own.values()):
        for c, nodes in classes.items():
            if 1 < len(nodes) <= DOMINANCE_MAX_CLASS:
                classes[c] = _undominated(nodes, own)
    reachable: dict[Value, list[ENode]] = {}
    stack = [root]
    while stack:
        c = stack.pop()
        if c in reachable:
            continue
        reachable[c] = classes[c]
        stack.extend(k for n in classes[c] for k in n.children if k not in reachable)
    return reachable


def _undominated(nodes: list[ENode], own: dict[ENode, float]) -> list[ENode]:
    ranked = sorted(nodes, key=lambda n: (own[n], len(set(n.children))))
    kept: list[tuple[ENode, frozenset[Value]]] = []
    for n in ranked:
        kids = frozenset(n.children)
        if not any(own[m] <= own[n] and mk <= kids for m, mk in kept):
            kept.append((n, kids))
    return [n for n, _ in kept]


def solve(
    by_class: dict[Value, list[ENode]],
    own: dict[ENode, float],
    root: Value,
    warm: dict[Value, ENode],
    time_limit: float,
    implied: bool = True,
) -> IlpOutcome:
    """The cheapest acyclic choice for root (see the module docstring). `warm` must be a
    valid acyclic choice: it seeds the solver and is kept when time runs out. `implied`
    adds the implied-class rows (up to IMPLIED_MAX_NODES e-nodes): they pay on a proof,
    not on the many small solves of the neighbourhood search. They are added only after a
    solve without them (QUICK_SHARE of the time) has not proved its answer: on e-graphs
    close to trees (the pipeline's) that proof is immediate and the rows, quadratic in the
    classes, cost seconds for nothing (docs/performance.md has the measurement)."""
    if time_limit < MIN_SOLVE_SECONDS:
        return IlpOutcome(warm, "time-out", None, None)
    classes = prune(by_class, own, root)
    if implied and sum(len(ns) for ns in classes.values()) <= IMPLIED_MAX_NODES:
        start = time.perf_counter()
        quick = _solve(classes, own, root, warm, time_limit * QUICK_SHARE, implied=False)
        if quick.status == "optimal":
            return quick
        warm = quick.choice
        time_limit -= time.perf_counter() - start
        return _solve(classes, own, root, warm, time_limit, implied=True)
    return _solve(classes, own, root, warm, time_limit, implied=False)


def _solve(
    classes: dict[Value, list[ENode]],
    own: dict[ENode, float],
    root: Value,
    warm: dict[Value, ENode],
    time_limit: float,
    implied: bool,
) -> IlpOutcome:
    """solve() over classes already pruned."""
    import highspy
    import numpy as np

    deadline = time.perf_counter() + time_limit
    warm_cost = total_cost(warm, own, root)
    if time_limit < MIN_SOLVE_SECONDS:
        return IlpOutcome(warm, "time-out", None, None)
    nodes = [n for ns in classes.values() for n in ns]
    if len(nodes) == len(classes):  # one choice left everywhere: nothing to solve
        forced = {c: ns[0] for c, ns in classes.items()}
        if not cycles_of(forced, root):
            cost = total_cost(forced, own, root)
            return IlpOutcome(forced, "optimal", 0.0, cost, 0, len(nodes))
    col = {n: i for i, n in enumerate(nodes)}
    inf = highspy.kHighsInf
    negative = any(own[n] < 0 for n in nodes)
    rows = _choice_rows(classes, root, col, deadline, implied, negative)
    if rows is None or deadline - time.perf_counter() < MIN_RUN_SECONDS:
        return IlpOutcome(warm, "time-out", None, None, 0, len(nodes))
    h = new_highs()
    order = _order_columns(classes, len(nodes)) if ORDER_ROWS else {}
    n_cols = len(nodes) + len(order)
    costs = np.array([own[n] for n in nodes] + [0.0] * len(order))
    upper = [1.0] * len(nodes) + [float(size - 1) for _, size, _ in order.values()]
    add_columns(h, costs.tolist(), integral=len(nodes), upper=upper)
    all_rows = rows + _order_rows(classes, col, order)
    add_rows(h, all_rows)
    nonzeros = sum(len(terms) for _, _, terms in all_rows)

    best, best_cost = warm, warm_cost
    lower: float | None = None
    rounds = 0
    while True:
        remaining = deadline - time.perf_counter()
        if remaining < MIN_SOLVE_SECONDS:
            break
        solution = highspy.HighsSolution()
        solution.col_value = _start_vector(best, classes, own, col, order, root, n_cols)
        h.setSolution(solution)
        if not _run_in_time(h, nonzeros, deadline):
            break  # still presolving or separating at the deadline: keep the best so far
        rounds += 1
        info = h.getInfo()
        if info.mip_dual_bound > -inf:  # costs may be negative: no floor at 0
            bound = float(info.mip_dual_bound)
            lower = bound if lower is None else max(lower, bound)
        if info.primal_solution_status != 2:
            break  # nothing feasible found in time
        proved = _proved_vector(h, costs, deadline)
        if proved is None:
            break
        info, x = proved
        chosen = {c: n for c, ns in classes.items() for n in ns if x[col[n]] > 0.5}
        cycles = cycles_of(chosen, root, everywhere=negative)
        if not cycles:
            cost = total_cost(chosen, own, root)
            if cost <= best_cost:
                best, best_cost = chosen, cost
            objective = float(info.objective_function_value)
            if h.getModelStatus() == highspy.HighsModelStatus.kOptimal and _attains(
                best_cost, objective
            ):
                return IlpOutcome(best, "optimal", 0.0, best_cost, rounds, len(nodes))
            break  # a proof of another vector (or of nodes no program uses) proves nothing
        add_rows(h, [(-inf, len(c) - 1.0, [(col[n], 1.0) for n in c]) for c in cycles])
    if lower is None:
        return IlpOutcome(best, "time-out", None, None, rounds, len(nodes))
    gap = max(0.0, best_cost - lower) / max(abs(best_cost), 1e-30)
    status = "optimal" if gap <= 1e-9 else "feasible"
    return IlpOutcome(best, status, gap, lower, rounds, len(nodes))


def _run_in_time(h: Any, nonzeros: int, deadline: float) -> bool:
    """One run that returns by the deadline (False: abandoned, h is the run's now).
    HiGHS's full presolve is not interruptible: 166k nonzeros took 6.6 s of a 3.8 s limit
    on a 2-core VM; past what the time left allows, its light pass (0.3 s) runs."""
    remaining = deadline - time.perf_counter()
    h.setOptionValue("time_limit", remaining)
    full = nonzeros <= PRESOLVE_NONZEROS_PER_S * remaining
    h.setOptionValue("presolve_mode", 0 if full else 2)
    return run_until(h, deadline)


def _proved_vector(h: Any, costs: Any, deadline: float) -> tuple[Any, Any] | None:
    """The solver's info and solution vector after a run that found one. HiGHS can hand
    back the start vector beside a better proven objective: then it solves again from
    scratch to get the vector it proved (None: nothing found in time)."""
    import numpy as np

    info, x = h.getInfo(), h.getSolution().col_value
    if _attains(float(np.dot(x, costs)), float(info.objective_function_value)):
        return info, x
    h.clearSolver()
    h.setOptionValue("time_limit", max(deadline - time.perf_counter(), MIN_SOLVE_SECONDS))
    if not run_until(h, deadline):
        return None
    info = h.getInfo()
    if info.primal_solution_status != 2:
        return None
    return info, h.getSolution().col_value


def _attains(cost: float, objective: float) -> bool:
    """Whether the program handed back costs what the solver says it proved optimal. It may
    not: HiGHS can hand back its start vector beside a better proven objective, and with
    negative costs the objective counts chosen nodes that no program uses."""
    return cost <= objective + 1e-9 * max(1.0, abs(objective))


def _choice_rows(
    classes: dict[Value, list[ENode]],
    root: Value,
    col: dict[ENode, int],
    deadline: float,
    implied: bool,
    tie_parents: bool,
) -> list[Row] | None:
    """The rows of the extraction program (None when the deadline passes while building):
    the root holds a node, a class holds at most one, a chosen node's children hold one,
    (with `implied`) the implied-class rows and (with `tie_parents`) a class other than the
    root holds a node only when a chosen node needs it. Without that tie a negative node
    nothing uses lowers the objective below every program's cost; with it, and no cycle
    among the chosen nodes (cut lazily), the chosen nodes are exactly one program."""
    import highspy

    inf = highspy.kHighsInf

    def holds(kept: list[ENode], users: list[ENode]) -> Row:
        """A class keeps a node (one of `kept`) whenever one of `users` is chosen."""
        return (0.0, inf, [*((col[m], 1.0) for m in kept), *((col[n], -1.0) for n in users)])

    rows: list[Row] = [(1.0, inf, [(col[n], 1.0) for n in classes[root]])]
    parents: dict[Value, list[ENode]] = {}
    for ns in classes.values():
        if len(ns) > 1:
            rows.append((-inf, 1.0, [(col[n], 1.0) for n in ns]))
    for i, ns in enumerate(classes.values()):
        if i % 128 == 0 and time.perf_counter() > deadline:
            return None
        needing: dict[Value, list[ENode]] = {}
        for n in ns:
            for k in set(n.children):
                needing.setdefault(k, []).append(n)
        for k, users in needing.items():  # class k holds a node when c's chosen node needs k
            rows.append(holds(classes[k], users))
            if tie_parents:
                parents.setdefault(k, []).extend(users)
    for k, users in parents.items():
        if k != root:  # k's node is chosen only under a chosen node needing k
            kept = [*((col[m], 1.0) for m in classes[k]), *((col[n], -1.0) for n in users)]
            rows.append((-inf, 0.0, kept))
    tighten = implied and len(col) <= IMPLIED_MAX_NODES
    budget = len(rows) + IMPLIED_MAX_ROWS
    for c, needed in (implied_classes(classes, deadline=deadline) if tighten else {}).items():
        rows += [holds(classes[d], classes[c]) for d in needed - {c}]  # d used wherever c is
        if len(rows) > budget or time.perf_counter() > deadline:
            break  # any subset of these rows is valid: the first ones are kept
    return rows


def _order_columns(
    classes: dict[Value, list[ENode]], first: int
) -> dict[Value, tuple[int, int, int]]:
    """For every class in a cycle of the class graph: a continuous order column (numbered
    from `first`), the size of its strong component and the component's number. Classes
    in no cycle need none; a component past ORDER_MAX_COMPONENT classes is left to the
    lazy cuts (its big-M rows are weak and slowed rover/mcm's proof from 8 to 14 s)."""
    adjacent = {c: {k for n in ns for k in n.children} for c, ns in classes.items()}
    out: dict[Value, tuple[int, int, int]] = {}
    for number, component in enumerate(strong_components(adjacent)):
        if 1 < len(component) <= ORDER_MAX_COMPONENT:
            for c in component:
                out[c] = (first + len(out), len(component), number)
    return out


def _order_rows(
    classes: dict[Value, list[ENode]],
    col: dict[ENode, int],
    order: dict[Value, tuple[int, int, int]],
) -> list[Row]:
    """Acyclicity where cycles exist: a chosen node ranks its class above each child in
    the same component, t[c] >= t[k] + 1 when x[n] = 1 (relaxed by the component's size
    when x[n] = 0). Integer answers then close no cycle, so HiGHS's heuristics find real
    programs instead of cyclic ones (tensat/bert); the lazy cuts stay as a check."""
    rows: list[Row] = []
    for c, (tc, size, number) in order.items():
        for n in classes[c]:
            for k in set(n.children):
                if k in order and order[k][2] == number:
                    terms = [(tc, 1.0), (order[k][0], -1.0), (col[n], -float(size))]
                    rows.append((1.0 - size, float("inf"), terms))
    return rows


def _start_vector(
    choice: dict[Value, ENode],
    classes: dict[Value, list[ENode]],
    own: dict[ENode, float],
    col: dict[ENode, int],
    order: dict[Value, tuple[int, int, int]],
    root: Value,
    n_cols: int,
) -> list[float]:
    """A known program as the solver's start: its nodes at 1, the order columns ranked."""
    start = [0.0] * n_cols
    known = _start_nodes(choice, classes, own, col, root)
    for n in known:
        start[col[n]] = 1.0
    if order:  # children first, numbered 0.. within each component (its column's bounds)
        program = {n.eclass: n for n in known}
        placed = [c for c in reachable(program, root) if c in order]  # children first
        within: dict[int, int] = {}
        for c in placed:
            column, _, number = order[c]
            start[column] = within.get(number, 0)
            within[number] = within.get(number, 0) + 1
    return start


def _start_nodes(
    choice: dict[Value, ENode],
    classes: dict[Value, list[ENode]],
    own: dict[ENode, float],
    col: dict[ENode, int],
    root: Value,
) -> list[ENode]:
    """The nodes of a known choice, each pruned one replaced by the node that dominated
    it (or the class's cheapest), walked from the root over what pruning kept."""
    out, seen, stack = [], {root}, [root]
    while stack:
        c = stack.pop()
        n = choice.get(c)
        if n not in col:
            kids = set(n.children) if n is not None else set()
            dominators = [m for m in classes[c] if n is not None and set(m.children) <= kids]
            n = min(dominators or classes[c], key=lambda m: own[m])
        out.append(n)
        for k in n.children:
            if k not in seen:
                seen.add(k)
                stack.append(k)
    return out


def implied_classes(
    classes: dict[Value, list[ENode]],
    limit: int = IMPLIED_LIMIT,
    deadline: float = float("inf"),
) -> dict[Value, frozenset[Value]]:
    """Per class c, the classes every acyclic program for c uses: c itself and, over its
    nodes, the intersection of what their children imply (the greatest fixpoint; a child
    with no acyclic program yet counts as implying everything). Empty when the sets grow
    past `limit` entries in all (the rows would cost more than they save) or the deadline
    passes."""
    implied: dict[Value, frozenset[Value] | None] = dict.fromkeys(classes)
    changed, entries = True, 0
    while changed:
        changed = False
        for i, (c, nodes) in enumerate(classes.items()):
            if i % 128 == 0 and time.perf_counter() > deadline:
                return {}  # a sweep is long on a busy machine: look at the clock within it
            common: frozenset[Value] | None = None
            for n in nodes:
                kids = [implied[k] for k in n.children]
                if any(k is None for k in kids):
                    continue  # a child without a program (yet): no constraint from n
                union = frozenset().union(*kids)  # type: ignore[arg-type]
                common = union if common is None else common & union
            if common is None:
                continue
            new = common | {c}
            if new != implied[c]:
                entries += len(new)
                if entries > limit:
                    return {}
                implied[c], changed = new, True
    return {c: s for c, s in implied.items() if s is not None}


def reachable_size(by_class: dict[Value, list[ENode]], root: Value) -> int:
    """How many e-nodes the classes reachable from root (through any node) hold."""
    seen, stack, size = {root}, [root], 0
    while stack:
        nodes = by_class.get(stack.pop(), ())
        size += len(nodes)
        for n in nodes:
            for k in n.children:
                if k not in seen:
                    seen.add(k)
                    stack.append(k)
    return size


def reachable_classes(choice: dict[Value, ENode], root: Value) -> list[Value]:
    """The classes the choice uses from root (any order; a cycle is walked once)."""
    seen, stack, out = {root}, [root], []
    while stack:
        c = stack.pop()
        out.append(c)
        for k in choice[c].children:
            if k not in seen:
                seen.add(k)
                stack.append(k)
    return out


def total_cost(choice: dict[Value, ENode], own: dict[ENode, float], root: Value) -> float:
    """DAG cost: each class the choice uses from root counted once."""
    return sum(own[choice[c]] for c in reachable_classes(choice, root))
