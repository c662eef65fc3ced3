"""MergeCompilerRegions: join neighbouring regions of one target into larger regions.

Regions are visited in data-dependency order. Each region inherits the restrictions of the
regions it reads from, and a parent region of another target becomes a restriction itself:
a parent of the same target is merged in unless it is restricted, that is, unless some
path from it reaches this region through a region of another target (merging would then
make the two regions depend on each other). `default` (host) regions merge the same way.
Where two regions merge, the compiler_end/compiler_begin pair between them goes.

Beyond TVM: regions of one target that read the same value (relu(x) and tanh(x)) merge
too, through one shared compiler_begin, where no path joins them; one function then reads
the value once (one launch), as PlaceTargets' cost model charges it.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_ir.expr import Call, Constant, Expr, Function, Var
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


def merge_siblings(rs: RegionSet, uf: UnionFind) -> dict[Expr, Expr]:
    """Regions of one target that read the same value through their own compiler_begin
    merge too, where neither reaches the other (a cycle otherwise): relu(x) and tanh(x)
    on one target are one function with one launch, as the placement model charges them.
    Returns begin -> the begin it is replaced by (one shared begin joins the regions)."""
    roots = {uf.find(r) for r in rs.regions}
    above: dict[int, set[int]] = {r: set() for r in roots}  # ancestors, in merged regions
    for r in region_order(rs):
        me = uf.find(r)
        for p in rs.parents(rs.regions[r]):
            q = uf.find(p)
            if q != me:
                above[me] |= above[q] | {q}
    by_source: dict[tuple[Expr, str], list[Expr]] = {}
    for n in rs.nodes:
        kind = annotation(n)
        if isinstance(n, Call) and kind is not None and kind[0] == "begin":
            source = n.args[0]  # the value itself, past the end of the region making it
            if isinstance(source, Call) and (annotation(source) or ("",))[0] == "end":
                source = source.args[0]
            by_source.setdefault((source, kind[1]), []).append(n)
    shared: dict[Expr, Expr] = {}
    for begins in by_source.values():
        keep = begins[0]
        for other in begins[1:]:
            a, b = uf.find(rs.region_of[keep]), uf.find(rs.region_of[other])
            if a == b:
                shared[other] = keep
                continue
            if a in above[b] or b in above[a]:
                continue  # a path joins them: merged, the region would depend on itself
            uf.parent[b] = a
            merged = above.pop(b) | above[a]
            above[a] = merged
            for anc in above.values():
                if b in anc or a in anc:
                    anc.discard(b)
                    anc |= merged | {a}
            shared[other] = keep
    return shared


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
        shared = merge_siblings(rs, uf)
        memo: dict[Expr, Expr] = {}
        removed = 0
        for n in rs.nodes:
            if n in shared:  # a sibling's own begin: the shared one joins the two regions
                memo[n] = memo[shared[n]]
                continue
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
        record(MergeRegionsReport(edges_merged=removed, siblings_merged=len(shared)))
        if not removed and not shared:
            return fn
        out = Function(fn.params, memo[fn.body], fn.ret_type, fn.attrs, fn.span)
        infer_type(out)
        return out


@dataclass(frozen=True, slots=True)
class MergeRegionsReport(PassReport):
    """Annotation pairs removed between neighbouring regions of one target, and begins
    shared between sibling regions of one target that read the same value."""

    edges_merged: int
    siblings_merged: int = 0
