"""What a copy between two devices costs: a cost per byte for each device pair, and the
cheapest route, which may pass through other devices (A -> B -> C at 0.1 + 0.1 beats a
direct A -> C at 1.0). PlanDevices places values so the routed bytes cost least and
inserts one device_copy per hop.

    PlanDevices(links={("cpu:0", "cpu:1"): 0.1, ("cpu:1", "cpu:2"): 0.1, ("cpu:0", "cpu:2"): 1})
    PassContext(config={"devices.link_costs": {"cpu:0->cpu:1": 0.1, ...}})

A pair not listed costs `default` (1.0 per byte, what every copy costs without a table).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from egraph_ir.device import VirtualDevice, as_device
from egraph_ir.errors import ConfigError

Pair = tuple[VirtualDevice | str, VirtualDevice | str]


@dataclass(frozen=True)
class Links:
    """Cost per byte of a direct copy for each listed (source, destination) pair."""

    costs: Mapping[tuple[VirtualDevice, VirtualDevice], float] = field(default_factory=dict)
    default: float = 1.0

    @staticmethod
    def of(table: Mapping[Pair, float] | Mapping[str, float] | Links | None) -> Links | None:
        """Links from {(src, dst): cost} or the config's {"src->dst": cost}; None if empty."""
        if table is None or isinstance(table, Links):
            return table
        costs: dict[tuple[VirtualDevice, VirtualDevice], float] = {}
        for key, value in table.items():
            pair = key.split("->") if isinstance(key, str) else key
            if len(pair) != 2 or not isinstance(value, int | float) or not value >= 0:
                raise ConfigError(
                    f"link costs: give {{(src, dst): cost per byte >= 0}} or "
                    f'{{"src->dst": cost}}, got {key!r}: {value!r}'
                )
            src, dst = (as_device(d.strip() if isinstance(d, str) else d) for d in pair)
            costs[(src, dst)] = float(value)
        return Links(costs) if costs else None

    def route(self, src: VirtualDevice, dst: VirtualDevice) -> tuple[float, list[VirtualDevice]]:
        """The cheapest route's cost per byte and its devices, src first."""
        return cheapest_route(self.costs, self.default, src, dst)


def cheapest_route[N](
    costs: Mapping[tuple[N, N], float], default: float, src: N, dst: N
) -> tuple[float, list[N]]:
    """The cheapest route from src to dst and its cost (per byte): Dijkstra over the
    listed pairs, every unlisted pair costing `default` directly. Also used for the
    target pairs of the placement cost (partition/placement/model.py)."""
    if src == dst:
        return 0.0, [src]
    nodes = {src, dst, *(d for pair in costs for d in pair)}
    best = {src: 0.0}
    before: dict[N, N] = {}
    queue = [(0.0, str(src), src)]
    done: set[N] = set()
    while queue:
        cost, _, here = heapq.heappop(queue)
        if here in done:
            continue
        done.add(here)
        for there in nodes - done:
            step = cost + costs.get((here, there), default)
            if step < best.get(there, float("inf")):
                best[there], before[there] = step, here
                heapq.heappush(queue, (step, str(there), there))
    path = [dst]
    while path[-1] != src:
        path.append(before[path[-1]])
    return best[dst], path[::-1]
