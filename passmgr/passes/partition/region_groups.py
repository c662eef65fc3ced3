"""The regions a placement will become, found without building them: the placed body goes
through the partitioner's own steps (annotation, MergeCompilerRegions' merges of
neighbours and of siblings) and each call is read off its region. The placement report
explains these groups; a test checks they are the functions PartitionGraph builds."""

from __future__ import annotations

from collections.abc import Mapping

from egraph_ir.expr import Call, Expr

from .annotate_target import annotate_body
from .merge_regions import merge_siblings, merged_regions
from .placement.model import Problem
from .regions import DEFAULT, find_regions


def predicted_regions(problem: Problem, place: Mapping[Expr, str], body: Expr) -> list[list[Call]]:
    """Groups of the calls on external targets, one per region, in the order of their
    first call; `body` is the function body `problem` was made from."""
    annotated, counterpart = annotate_body(body, lambda c: place.get(c, DEFAULT), True)
    rs = find_regions(annotated)
    uf = merged_regions(rs)
    merge_siblings(rs, uf)
    groups: dict[int, list[Call]] = {}
    for c in problem.calls:
        if place.get(c, DEFAULT) != DEFAULT:
            groups.setdefault(uf.find(rs.region_of[counterpart[c]]), []).append(c)
    return list(groups.values())
