"""MergeCompilerRegions: join neighbouring regions of one target into larger regions.

Regions are visited in data-dependency order. Each region inherits the restrictions of the
regions it reads from, and a parent region of another target becomes a restriction itself:
a parent of the same target is merged in unless it is restricted, that is, unless some
path from it reaches this region through a region of another target (merging would then
make the two regions depend on each other). `default` (host) regions merge the same way.
Where two regions merge, the compiler_end/compiler_begin pair between them goes.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_ir.expr import Constant, Expr, Function, Var
from egraph_ir.infer import infer_type
from egraph_ir.inline import rebuild_keeping_functions
from egraph_ir.module import IRModule

from ...context import PassContext
from ...pass_base import FunctionPass
from ...registry import register_pass
from ...run import PassReport, record
from .regions import RegionSet, UnionFind, annotation, find_regions, region_order


def merged_regions(rs: RegionSet) -> UnionFind:
    """Which regions merge (TVM's restriction algorithm, see the module docstring)."""
    uf = UnionFind()
    restrictions: dict[int, set[int]] = {}
    for r in region_order(rs):
        region = rs.regions[r]
        parents = list(dict.fromkeys(uf.find(p) for p in rs.parents(region)))
        restricted: set[int] = set()
        for p in parents:
            restricted.update(uf.find(x) for x in restrictions.get(p, ()))
        if not region.target:  # outside every region: never merged, a barrier to others
            restricted.update(parents)
            restrictions[r] = restricted
            continue
        for p in parents:
            if rs.regions[p].target != region.target:
                restricted.add(p)
        for p in parents:
            if p not in restricted and rs.regions[p].target == region.target:
                uf.parent[p] = r  # the parent joins this region (r stays the root)
        restrictions[r] = restricted
    return uf


@register_pass
@dataclass(frozen=True)
class MergeCompilerRegions(FunctionPass):
    """Merge regions of one target where no cycle results (see the module docstring)."""

    required = ("InferType",)
    idempotent = True

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        rs = find_regions(fn.body)
        if not any(r.target for r in rs.regions.values()):
            return fn
        uf = merged_regions(rs)
        memo: dict[Expr, Expr] = {}
        removed = 0
        for n in rs.nodes:
            kind = annotation(n)
            if kind is not None and kind[0] == "begin":
                src = n.args[0]  # type: ignore[attr-defined]
                if (annotation(src) or ("",))[0] == "end":
                    a, b = rs.region_of[src], rs.region_of[n]
                    if uf.find(a) == uf.find(b):
                        memo[n] = memo[src.args[0]]
                        removed += 1
                        continue
            memo[n] = n if isinstance(n, Var | Constant) else rebuild_keeping_functions(n, memo)
        record(MergeRegionsReport(edges_merged=removed))
        if not removed:
            return fn
        out = Function(fn.params, memo[fn.body], fn.ret_type, fn.attrs, fn.span)
        infer_type(out)
        return out


@dataclass(frozen=True, slots=True)
class MergeRegionsReport(PassReport):
    """Annotation pairs removed between neighbouring regions of one target, in one function."""

    edges_merged: int
