"""The regions a placement will become, predicted without building them: calls on one
target that MergeCompilerRegions joins (a producer and its consumer, the fields of a
result tuple on one target, then readers of one value) unless a path from one to the other
through a third region would make the joined region depend on itself. Host calls form
regions the same way, since the paths between regions run through them. The placement
report explains these groups; a test checks they are the functions PartitionGraph builds."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from egraph_ir.expr import Call, Expr

from .place_model import Problem
from .regions import DEFAULT, UnionFind


class _Groups:
    """Calls joined into regions, and the reads between them."""

    def __init__(self, problem: Problem) -> None:
        self.index = {c: i for i, c in enumerate(problem.calls)}
        self.calls = problem.calls
        self.readers: list[list[int]] = [[] for _ in problem.calls]
        for value, users in problem.readers.items():
            home = problem.home(value)
            if isinstance(home, Call) and home in self.index:
                self.readers[self.index[home]].extend(self.index[u] for u in users)
        self.uf = UnionFind()
        self.members: dict[int, list[int]] = {i: [i] for i in range(len(problem.calls))}

    def join(self, a: Call, b: Call) -> None:
        ra, rb = self.uf.find(self.index[a]), self.uf.find(self.index[b])
        if ra == rb or self._path_through_others(ra, rb) or self._path_through_others(rb, ra):
            return
        self.uf.union(ra, rb)
        root = self.uf.find(ra)
        self.members[root] = self.members.pop(ra) + self.members.pop(rb)

    def _path_through_others(self, start: int, goal: int) -> bool:
        """Whether a read leads from region `start` to region `goal` through another."""
        find = self.uf.find
        stack = [
            g
            for m in self.members[start]
            for u in self.readers[m]
            if (g := find(u)) not in (start, goal)
        ]
        seen = set(stack)
        while stack:
            group = stack.pop()
            for m in self.members[group]:
                for u in self.readers[m]:
                    g = find(u)
                    if g == goal:
                        return True
                    if g != start and g not in seen:
                        seen.add(g)
                        stack.append(g)
        return False

    def of(self, calls: list[Call]) -> list[list[Call]]:
        groups: dict[int, list[Call]] = {}
        for c in calls:
            groups.setdefault(self.uf.find(self.index[c]), []).append(c)
        return list(groups.values())


def predicted_regions(problem: Problem, place: Mapping[Expr, str]) -> list[list[Call]]:
    """Groups of calls on external targets, in the order of their first call."""
    groups = _Groups(problem)

    def where(c: Expr) -> str:
        return place.get(c, DEFAULT)

    for c in problem.calls:  # a producer and its consumer on one target (TVM's merge)
        for u in [groups.calls[i] for i in groups.readers[groups.index[c]]]:
            if where(u) == where(c):
                groups.join(c, u)
    fields = [problem.home(v) for v in problem.outputs] if len(problem.outputs) > 1 else []
    placed = [f for f in fields if isinstance(f, Call) and f in groups.index]
    if {where(f) for f in placed} - {DEFAULT} and len({where(f) for f in placed}) == 1:
        # the result tuple joins its fields' region (on the host, TVM's restrictions keep
        # most of its fields apart: left as they are)
        for a, b in itertools.pairwise(placed):
            groups.join(a, b)
    for value, users in problem.readers.items():  # readers of one value (siblings)
        held = where(problem.home(value))
        for t in sorted({where(u) for u in users} - {held}):  # one order every run
            first, *others = [u for u in users if where(u) == t]
            for other in others:  # each with the first, as MergeCompilerRegions shares its begin
                groups.join(first, other)
    return groups.of([c for c in problem.calls if where(c) != DEFAULT])
