"""Annotated regions: the parts of a function bounded by compiler_begin/compiler_end.

A region is what lies between the `compiler_begin` annotations on its incoming edges and
the `compiler_end` annotations on its outgoing ones (the seed RFC's definition; the
annotations belong to the region they bound). Nodes are grouped with a union-find over the
function's dataflow: a node joins its arguments' region unless the edge crosses an
annotation. MergeCompilerRegions and PartitionGraph both read regions this way.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from egraph_ir.errors import PassError
from egraph_ir.expr import Call, Expr, Tuple, TupleGetItem
from egraph_ir.registry import Op
from egraph_ir.visitor import post_order

BEGIN, END = "compiler_begin", "compiler_end"
DEFAULT = "default"


def annotation(e: Expr) -> tuple[str, str] | None:
    """("begin" or "end", compiler) for an annotation call, else None."""
    if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name in (BEGIN, END):
        return e.op.name[9:], str(e.attrs["compiler"])
    return None


def is_dataflow(e: Expr) -> bool:
    """Nodes that can sit inside a region: calls, tuples and tuple fields."""
    return isinstance(e, Call | Tuple | TupleGetItem)


def inputs(e: Expr) -> tuple[Expr, ...]:
    """The values a dataflow node reads (a call's callee is not a value)."""
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    return ()


@dataclass
class Region:
    """Dataflow nodes grouped between annotations. `target` is "" for plain dataflow that
    no annotation bounds (outside every region: never merged, never partitioned)."""

    id: int
    target: str
    order: int  # position of its first node in post-order
    members: list[Expr] = field(default_factory=list)  # dataflow nodes, post-order
    begins: list[Call] = field(default_factory=list)
    ends: list[Call] = field(default_factory=list)


class UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, a: int) -> int:
        root = a
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(a, a) != root:
            self.parent[a], a = root, self.parent[a]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class RegionSet:
    """The regions of one function body."""

    nodes: list[Expr]  # post-order, function literals not entered
    regions: dict[int, Region]
    region_of: dict[Expr, int]  # dataflow node or annotation -> region id

    def parents(self, region: Region) -> list[int]:
        """Regions whose values this one reads, in order of first use."""
        out: dict[int, None] = {}
        for n in (*region.members, *region.begins):
            for c in inputs(n):
                src = self.region_of.get(c)
                if src is not None and src != region.id:
                    out[src] = None
        return list(out)


def find_regions(body: Expr) -> RegionSet:
    """Group the dataflow of `body` into regions."""
    nodes = list(post_order(body, into_functions=False))
    index = {n: i for i, n in enumerate(nodes)}
    uf = UnionFind()
    for i, n in enumerate(nodes):
        kind = annotation(n)
        if kind is not None:
            if kind[0] == "end" and is_dataflow(n.args[0]):  # type: ignore[attr-defined]
                uf.union(i, index[n.args[0]])  # type: ignore[attr-defined]
            continue
        for c in inputs(n):
            a = annotation(c)
            if a is not None and a[0] == "end":
                continue  # n reads a region's output: n is outside that region
            if a is not None or is_dataflow(c):
                uf.union(i, index[c])
    regions: dict[int, Region] = {}
    region_of: dict[Expr, int] = {}
    for i, n in enumerate(nodes):
        if not is_dataflow(n):
            continue
        root = uf.find(i)
        region = regions.get(root)
        if region is None:
            region = regions[root] = Region(root, "", i)
        region_of[n] = root
        kind = annotation(n)
        if kind is None:
            region.members.append(n)
            continue
        if region.target and region.target != kind[1]:
            raise PassError(
                f"one annotated region mixes targets '{region.target}' and '{kind[1]}' "
                "(annotations must bound regions of a single target)"
            )
        region.target = kind[1]
        (region.begins if kind[0] == "begin" else region.ends).append(n)  # type: ignore[arg-type]
    return RegionSet(nodes, regions, region_of)


def region_order(rs: RegionSet) -> list[int]:
    """Regions in a topological order of their data dependencies (Kahn's algorithm, ties
    by first appearance); a cycle between regions is an error."""
    parents = {r: rs.parents(reg) for r, reg in rs.regions.items()}
    children: dict[int, list[int]] = {r: [] for r in rs.regions}
    waiting = {r: len(ps) for r, ps in parents.items()}
    for r, ps in parents.items():
        for p in ps:
            children[p].append(r)
    ready = [(rs.regions[r].order, r) for r, w in waiting.items() if w == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        _, r = heapq.heappop(ready)
        out.append(r)
        for c in children[r]:
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (rs.regions[c].order, c))
    if len(out) != len(rs.regions):
        stuck = sorted({rs.regions[r].target for r in rs.regions if waiting[r] > 0})
        raise PassError(
            f"annotated regions depend on each other in a cycle (targets: {', '.join(stuck)}); "
            "each region must be convex"
        )
    return out
