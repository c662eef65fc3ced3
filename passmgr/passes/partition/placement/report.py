"""What a placement chose and why: per region built, its target, its own cost and the best
rejected alternative; per group of calls kept on the host that a target could run, the
same. `str(PlacementReport)` is a table, `.to_json()` its data."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from egraph_ir.expr import Call, Expr

from ..region_groups import predicted_regions
from ..regions import DEFAULT, UnionFind
from .model import PlacementCost, Problem, call_name, placement_cost


@dataclass
class RegionReport:
    target: str
    ops: list[str]
    cost: float  # this group's own: its ops on target, its launch and the copies into it
    total: float  # the whole placement's cost
    alternative: str  # the best other target for these ops, all moved together
    alternative_total: float  # the whole placement's cost with them there

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def report_regions(
    problem: Problem, place: Mapping[Expr, str], cost: PlacementCost, body: Expr
) -> list[RegionReport]:
    """Per region the placement becomes (region_groups.py): its target, its own cost (a
    launch per region as built, even where the model saw fewer), and the best rejected
    alternative (the group moved whole to another target) with the whole
    placement's cost then."""
    total = placement_cost(problem, place, cost)
    out = []
    for group in predicted_regions(problem, place, body):
        best_t, best_cost = _best_move(problem, place, cost, group)
        t = place[group[0]]
        own = sum(problem.choices[m][t] for m in group) + cost.launch_of(t)
        inside = set(group)
        for v, users in problem.readers.items():
            home = problem.home(v)
            if home not in inside and inside & set(users):
                source = place.get(home, DEFAULT)
                own += cost.copy_per_byte(source, t) * problem.bytes_of.get(v, 0)
        names = [call_name(m) for m in group]
        out.append(RegionReport(t, names, own, total, best_t, best_cost))
    return out


def report_host(
    problem: Problem, place: Mapping[Expr, str], cost: PlacementCost
) -> list[RegionReport]:
    """The host's decisions: each group of neighbouring host calls that some target could
    also run, with the best target for the group moved whole and the total then."""
    total = placement_cost(problem, place, cost)
    kept = [
        c for c in problem.calls if place.get(c, DEFAULT) == DEFAULT and len(problem.choices[c]) > 1
    ]
    ids = {c: i for i, c in enumerate(kept)}
    uf = UnionFind()
    for v, users in problem.readers.items():
        home = problem.home(v)
        for u in users:
            if (
                home in ids
                and u in ids
                and set(problem.choices[home]) & set(problem.choices[u]) - {DEFAULT}
            ):
                uf.union(ids[home], ids[u])
    groups: dict[int, list[Call]] = {}
    for c in kept:
        groups.setdefault(uf.find(ids[c]), []).append(c)
    out = []
    for group in groups.values():
        shared = set.intersection(*(set(problem.choices[m]) for m in group)) - {DEFAULT}
        parts = [group] if shared else [[m] for m in group]
        for part in parts:
            best_t, best_cost = _best_move(problem, place, cost, part)
            own = sum(problem.choices[m][DEFAULT] for m in part)
            out.append(
                RegionReport(DEFAULT, [call_name(m) for m in part], own, total, best_t, best_cost)
            )
    return out


def _best_move(
    problem: Problem, place: Mapping[Expr, str], cost: PlacementCost, group: list[Call]
) -> tuple[str, float]:
    """The target other than the group's own that costs least with the group moved there."""
    here = place.get(group[0], DEFAULT)
    best_t, best_cost = DEFAULT, float("inf")
    for t in sorted(set.intersection(*(set(problem.choices[m]) for m in group)) - {here}):
        alt = placement_cost(problem, {**place, **dict.fromkeys(group, t)}, cost)
        if alt < best_cost:
            best_t, best_cost = t, alt
    return best_t, best_cost


@dataclass
class PlacementReport:
    """The chosen placement's cost, AnnotateTarget's (greedy) cost under the same model,
    and per region its target and the best rejected alternative. `str()` is a table."""

    cost: float = 0.0
    greedy_cost: float = 0.0
    regions: list[RegionReport] = field(default_factory=list)
    rewritten: int = 0  # functions whose program the offload rules changed
    host: list[RegionReport] = field(default_factory=list)  # calls kept home that could go

    def to_json(self) -> str:
        data = {"cost": self.cost, "greedy_cost": self.greedy_cost, "rewritten": self.rewritten}
        regions = {"regions": [r.to_dict() for r in self.regions]}
        return json.dumps({**data, **regions, "host": [r.to_dict() for r in self.host]}, indent=1)

    def __str__(self) -> str:
        lines = [
            f"placement cost {self.cost:.6g} (first-supporting-target: {self.greedy_cost:.6g})"
        ]
        for r in [*self.regions, *self.host]:
            lines.append(
                f"  {r.target:<12} {', '.join(r.ops)}: {r.cost:.3g}; rejected {r.alternative} "
                f"(total +{r.alternative_total - r.total:.3g})"
            )
        return "\n".join(lines)
