"""The device cut: where two or more devices meet in a connected set of expressions, the
placement copying the fewest bytes (analysis.py's step 2), found exactly by an integer
program (HiGHS), with a soft edge per use of a value."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from egraph_ir.device import VirtualDevice
from egraph_ir.expr import Expr
from egraph_ir.highs import Row, add_columns, add_rows, new_highs, run_until

from .links import Links

CUT_TIME_LIMIT_S = 10.0


@dataclass
class SoftEdge:
    """The value of `value` (held by domain `src`) used where domain `dst` is: if they end
    on different devices, `bytes` are copied, once per value and destination device."""

    src: int
    dst: int
    bytes: int
    annotation: bool  # a free on_device: preferred place for a copy on ties
    value: Expr
    late: bool = False  # a function's result after its body: on ties, copy before instead


def components(pairs: list[tuple[int, int]]) -> dict[int, int]:
    """Each node of the undirected graph `pairs` and a key of its connected component."""
    adjacency: dict[int, list[int]] = {}
    for a, b in pairs:
        adjacency.setdefault(a, []).append(b)
        adjacency.setdefault(b, []).append(a)
    component: dict[int, int] = {}
    for start in adjacency:
        if start in component:
            continue
        component[start] = start
        stack = [start]
        while stack:
            for nxt in adjacency[stack.pop()]:
                if nxt not in component:
                    component[nxt] = start
                    stack.append(nxt)
    return component


@dataclass
class CopyGroup:
    """One value, the domain holding it and the domains using it: placing users on other
    devices costs one copy per other device."""

    source: int
    users: list[int]
    bytes: int
    annotation: bool
    late: bool = False

    def destinations(self, placed: dict[int, VirtualDevice]) -> set[VirtualDevice]:
        return {placed[u] for u in self.users} - {placed[self.source]}


def copy_groups(edges: Iterable[tuple[int, int, SoftEdge]]) -> list[CopyGroup]:
    groups: dict[tuple[int, int], CopyGroup] = {}
    for a, b, e in edges:
        key = (id(e.value), a)
        if key not in groups:
            groups[key] = CopyGroup(a, [], e.bytes, e.annotation, e.late)
        groups[key].users.append(b)
    return list(groups.values())


def multiway_cut(
    roots: list[int],
    pins: dict[int, VirtualDevice],
    groups: list[CopyGroup],
    devices: list[VirtualDevice],
    links: Links | None = None,
) -> dict[int, VirtualDevice]:
    """Place every root on one of `devices`, pinned roots on their own, so the bytes
    copied are fewest, a value counting once per device it must reach. An integer program
    (HiGHS): x[r, k] says r is on device k; c[g, k] >= x[u, k] - x[source, k] for every user
    u says group g's value is copied to k. Copies of a free on_device's value cost a hair
    less so that, on ties, they go where the user allowed them (TVM's place), and a copy of
    a function's result after its body a hair more (TVM copies the inputs). Falls back
    to the nearest pin when the solver runs out of time."""
    import highspy
    import numpy as np

    col = {r: i for i, r in enumerate(roots)}
    k = len(devices)
    nx = len(roots) * k
    n_cols = nx + len(groups) * k
    inf = highspy.kHighsInf
    h = new_highs(CUT_TIME_LIMIT_S)
    lower = np.zeros(n_cols)
    upper = np.ones(n_cols)
    for r, vd in pins.items():
        lower[col[r] * k + devices.index(vd)] = 1.0
    rows: list[Row] = []
    for r in roots:
        rows.append((1.0, 1.0, [(col[r] * k + j, 1.0) for j in range(k)]))
    if links is None:
        costs = [0.0] * nx
        for g in groups:
            costs += [_copy_cost(g, 1.0)] * k
        add_columns(h, costs, integral=nx, lower=lower, upper=upper)
        for i, g in enumerate(groups):
            for j in range(k):
                copied, held = nx + i * k + j, col[g.source] * k + j
                for u in set(g.users):
                    rows.append((0.0, inf, [(copied, 1.0), (col[u] * k + j, -1.0), (held, 1.0)]))
    else:  # the cost depends on where the value is too: y[g, a, b] >= x[src, a] + x[u, b] - 1
        pairs = [(a, b) for a in range(k) for b in range(k) if a != b]
        per_byte = [links.route(devices[a], devices[b])[0] for a, b in pairs]
        smallest = min([g.bytes * c for g in groups for c in per_byte if g.bytes * c > 0] or [1])
        tie = min(1.0, smallest / 4)  # tie-breaks stay below the cheapest copy
        costs = [0.0] * nx + [_copy_cost(g, c, tie) for g in groups for c in per_byte]
        upper = np.ones(nx + len(groups) * len(pairs))
        lower = np.concatenate([lower[:nx], np.zeros(len(groups) * len(pairs))])
        add_columns(h, costs, integral=nx, lower=lower, upper=upper)
        for i, g in enumerate(groups):
            for p, (a, b) in enumerate(pairs):
                copied, held = nx + i * len(pairs) + p, col[g.source] * k + a
                for u in set(g.users):
                    row = [(copied, 1.0), (held, -1.0), (col[u] * k + b, -1.0)]
                    rows.append((-1.0, inf, row))
    add_rows(h, rows)
    finished = run_until(h, time.perf_counter() + CUT_TIME_LIMIT_S)
    if not finished or h.getInfo().primal_solution_status != 2:
        return _nearest_pin(roots, pins, groups)
    x = h.getSolution().col_value
    return {r: devices[int(np.argmax(x[col[r] * k : col[r] * k + k]))] for r in roots}


def _copy_cost(g: CopyGroup, per_byte: float, tie: float = 1.0) -> float:
    """A copy's cost in the cut, doubled so that the tie-breaks (a hair less into a free
    on_device, a hair more after a function's body; `tie` units) never outweigh a byte."""
    breaks = 2.0 - (1.0 if g.annotation else 0.0) + float(g.late)
    return 2.0 * g.bytes * per_byte + tie * breaks


def _nearest_pin(
    roots: list[int], pins: dict[int, VirtualDevice], groups: list[CopyGroup]
) -> dict[int, VirtualDevice]:
    adjacency: dict[int, list[int]] = {r: [] for r in roots}
    for g in groups:
        for u in g.users:
            adjacency[g.source].append(u)
            adjacency[u].append(g.source)
    placed = dict(pins)
    frontier = list(pins)
    while frontier:
        nxt = []
        for r in frontier:
            for s in adjacency[r]:
                if s not in placed:
                    placed[s] = placed[r]
                    nxt.append(s)
        frontier = nxt
    return placed
