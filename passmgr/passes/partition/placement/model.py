"""The placement cost model, without the pass or its integer program (solve.py).

The cost of a placement (`placement_cost`, also used by the tests' brute force):

- each call costs `cost.op(call, target)` on its target (None: the target cannot run it;
  the host, `default`, runs everything);
- each region costs one launch, `cost.launch_of(T)` (a call into the external library or
  runtime; 0 for the host). A region is what MergeCompilerRegions builds: calls on T joined
  by the values they pass each other, and calls on T reading the same value from elsewhere
  (siblings share the region's entry). A chain of cheap ops pays one launch, which a
  per-op cost model would never offload;
- each value read on a target other than where it is computed (graph inputs: the host)
  is copied there once however many calls read it: its bytes times the cheapest route's
  cost per byte (`cost.links` per target pair, unlisted pairs `cost.per_byte`; a route may
  pass through other targets, A -> B -> C beating a dear A -> C);
- a function result computed on a target is copied back to the host the same way;
- `cost.budget[T]` bounds the bytes on T (the values its calls compute, the constants
  bound into them and the values copied in): a placement over a budget costs infinity,
  so the solver spills calls to other targets or the host, and a plan that cannot fit is
  a clear error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from egraph_ir.errors import ConfigError
from egraph_ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from egraph_ir.module import IRModule
from egraph_ir.registry import Op
from egraph_ir.support import composite_target, list_targets, supports
from egraph_ir.types import TensorType, tensor_types
from egraph_ir.visitor import post_order

from ...devices.links import cheapest_route
from ..regions import DEFAULT, UnionFind

OpCost = Callable[[Call, str], "float | None"]
Measure = Callable[[Sequence[IRModule]], list[float]]


@dataclass(frozen=True)
class PlacementCost:
    """What a placement costs: `op(call, target)` (None where the target cannot run the
    call; the host must run everything), `launch[target]` per region on the target,
    `per_byte` per byte copied between targets unless `links` lists the pair
    ({(src, dst): cost per byte}, or the config's {"src->dst": cost}), `budget` the bytes
    each target may hold ({target: bytes})."""

    op: OpCost
    launch: Mapping[str, float] | Callable[[str], float] = field(default_factory=dict)
    per_byte: float = 0.0
    measure: Measure | None = None  # seconds of whole partitioned modules (place_measured)
    links: Mapping[Any, float] = field(default_factory=dict)
    budget: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "links", target_links(self.links))
        object.__setattr__(self, "budget", target_budget(self.budget))

    def launch_of(self, target: str) -> float:
        if target == DEFAULT:
            return 0.0
        if callable(self.launch):
            return float(self.launch(target))
        return float(self.launch.get(target, 0.0))

    def copy_per_byte(self, src: str, dst: str) -> float:
        """Cost per byte of moving a value from src to dst by the cheapest route."""
        if not self.links:
            return 0.0 if src == dst else self.per_byte
        return cheapest_route(self.links, self.per_byte, src, dst)[0]


def target_links(table: Mapping[Any, float]) -> dict[tuple[str, str], float]:
    """{(src, dst): cost per byte} from that or from {"src->dst": cost}, checked."""
    links: dict[tuple[str, str], float] = {}
    for key, value in table.items():
        pair = tuple(p.strip() for p in key.split("->")) if isinstance(key, str) else key
        ok = isinstance(value, int | float) and value >= 0
        if not (ok and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
            raise ConfigError(
                "placement link costs: give {(src target, dst target): cost per byte >= 0} "
                f'or {{"src->dst": cost}}, got {key!r}: {value!r}'
            )
        links[(pair[0], pair[1])] = float(value)
    return links


def target_budget(table: Mapping[str, int]) -> dict[str, int]:
    """{target: bytes}, checked."""
    for key, value in table.items():
        if not isinstance(key, str) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"placement budget: give {{target: bytes >= 0}}, got {key!r}: {value!r}"
            )
    return dict(table)


NOMINAL_FLOPS_PER_S = 1e9
NOMINAL_LAUNCH_S = 5e-6  # a call into an external runtime: a few microseconds
NOMINAL_S_PER_BYTE = 1e-10


def nominal_cost() -> PlacementCost:
    """The default model, knowing nothing of the targets: every op costs its FLOPs at
    1 GFLOP/s everywhere, a region entry 5 us, a copy 0.1 ns per byte. With equal op costs
    nothing is worth a launch, so this keeps everything on the host; give measured or
    tabled costs (`cost_table`) to offload."""

    def op(call: Call, target: str) -> float | None:
        if not isinstance(call.op, Op):
            return None
        types = [a.checked_type for a in call.args]
        tensors = [t for t in types if isinstance(t, TensorType)]
        return call.op.cost(tensors, call.checked_type, call.attrs).flops / NOMINAL_FLOPS_PER_S

    launch = dict.fromkeys(list_targets(), NOMINAL_LAUNCH_S)
    return PlacementCost(op, launch, NOMINAL_S_PER_BYTE)


def cost_table(
    ops: Mapping[tuple[str, str], float | Callable[[Call], float]],
    launch: Mapping[str, float] | None = None,
    per_byte: float = 0.0,
    links: Mapping[Any, float] | None = None,
    budget: Mapping[str, int] | None = None,
) -> PlacementCost:
    """A PlacementCost from a table {(op name, target): cost or cost(call)}; an op a target
    has no entry for (and does not `supports`) cannot go there. Host ("default") entries
    default to 0. `links` and `budget` as PlacementCost's."""

    def op(call: Call, target: str) -> float | None:
        name = call_name(call)
        entry = ops.get((name, target))
        if entry is None:
            return 0.0 if target == DEFAULT else None
        return float(entry(call) if callable(entry) else entry)

    return PlacementCost(op, dict(launch or {}), per_byte, links=links or {}, budget=budget or {})


def call_name(call: Call) -> str:
    if isinstance(call.op, Op):
        return call.op.name
    target = composite_target(call.op) if isinstance(call.op, Function) else None
    return f"composite {target}" if target else "?"


def is_composite(call: Call) -> bool:
    return isinstance(call.op, Function) and bool(composite_target(call.op))


def _placeable(n: Expr) -> bool:
    """An op call, or a call of a composite function (MergeComposite)."""
    return isinstance(n, Call) and (isinstance(n.op, Op) or is_composite(n))


@dataclass
class Problem:
    """The calls of one function, the values they read and the targets each may use."""

    calls: list[Call]
    choices: dict[Call, dict[str, float]]  # call -> {target: cost}
    readers: dict[Expr, list[Call]]  # value -> the calls reading it
    outputs: list[Expr]  # values the function returns
    bytes_of: dict[Expr, int]
    homes: dict[Expr, Expr] = field(default_factory=dict)  # a tuple's field -> its producer
    # call -> the bytes of the constants bound into its region (weights a target holds;
    # a constant two calls read is counted with each)
    constants_of: dict[Call, int] = field(default_factory=dict)

    def home(self, value: Expr) -> Expr:
        """The expression whose placement holds `value`: a field of a tuple-producing call
        (`%bn.0`) is where the call is, not a value of its own on the host."""
        return self.homes.get(value, value)


def problem_of(fn: Function, targets: Sequence[str], cost: PlacementCost) -> Problem:
    calls: list[Call] = []
    choices: dict[Call, dict[str, float]] = {}
    readers: dict[Expr, list[Call]] = {}
    bytes_of: dict[Expr, int] = {}
    constants_of: dict[Call, int] = {}
    for n in post_order(fn.body, into_functions=False):
        if isinstance(n, Call) and _placeable(n):
            host = cost.op(n, DEFAULT)
            options = {DEFAULT: 0.0 if host is None else host}
            for t in targets:
                c = cost.op(n, t)
                if c is not None and supports(t, n):
                    options[t] = c
            calls.append(n)
            choices[n] = options
            for a in dict.fromkeys(n.args):
                if not isinstance(a, Constant):  # constants are bound into the regions
                    readers.setdefault(a, []).append(n)
            bound = [a for a in dict.fromkeys(n.args) if isinstance(a, Constant)]
            constants_of[n] = sum(a.data.nbytes for a in bound)
        if isinstance(n, Call | Var | TupleGetItem):
            bytes_of[n] = sum(t.nbytes for t in tensor_types(n.checked_type))
    body = fn.body
    outputs = list(body.fields) if isinstance(body, Tuple) else [body]
    homes: dict[Expr, Expr] = {}
    for value in [*readers, *outputs]:
        producer = value
        while isinstance(producer, TupleGetItem):
            producer = producer.tuple_value
        if producer is not value and producer in choices:
            homes[value] = producer
    return Problem(calls, choices, readers, outputs, bytes_of, homes, constants_of)


def placement_cost(problem: Problem, place: Mapping[Expr, str], cost: PlacementCost) -> float:
    """The cost model of the module docstring for one placement (calls absent: host);
    infinity when a target holds more bytes than its budget."""
    copied = entries(problem, place)
    if cost.budget:
        held = bytes_by_target(problem, place, copied)
        if any(held.get(t, 0) > limit for t, limit in cost.budget.items()):
            return float("inf")
    return sum(cost_by_target(problem, place, cost, copied).values())


def entries(problem: Problem, place: Mapping[Expr, str]) -> dict[Expr, set[str]]:
    """Per value, the targets it is copied to (read there, computed elsewhere)."""
    out: dict[Expr, set[str]] = {}
    for value, users in problem.readers.items():
        home = place.get(problem.home(value), DEFAULT)
        out[value] = {place.get(u, DEFAULT) for u in users} - {home}
    return out


Copied = dict[Expr, set[str]]  # what `entries` gives: computed once per placement


def cost_by_target(
    problem: Problem,
    place: Mapping[Expr, str],
    cost: PlacementCost,
    copied: Copied | None = None,
) -> dict[str, float]:
    """placement_cost split by where it is spent: each target's ops, its launches and the
    copies into it (copies of results back to the host count for the host)."""
    copied = entries(problem, place) if copied is None else copied
    spent: dict[str, float] = {DEFAULT: 0.0}
    for c in problem.calls:
        t = place.get(c, DEFAULT)
        spent[t] = spent.get(t, 0.0) + problem.choices[c][t]
    for value, targets in copied.items():
        home = place.get(problem.home(value), DEFAULT)
        for t in targets:
            copy = cost.copy_per_byte(home, t) * problem.bytes_of.get(value, 0)
            spent[t] = spent.get(t, 0.0) + copy
    for out in problem.outputs:
        home = place.get(problem.home(out), DEFAULT)
        spent[DEFAULT] += cost.copy_per_byte(home, DEFAULT) * problem.bytes_of.get(out, 0)
    for t, n in region_counts(problem, place, copied).items():
        spent[t] = spent.get(t, 0.0) + n * cost.launch_of(t)
    return spent


def region_counts(
    problem: Problem, place: Mapping[Expr, str], copied: Copied | None = None
) -> dict[str, int]:
    """Regions per target off the host: groups of its calls joined by the values they pass
    each other and by a value they all read from elsewhere (MergeCompilerRegions' merges;
    a split it makes to avoid a cycle is not counted)."""
    on = {c: place.get(c, DEFAULT) for c in problem.calls}
    ids: dict[object, int] = {c: i for i, c in enumerate(problem.calls)}
    uf = UnionFind()
    copied = entries(problem, place) if copied is None else copied
    for value, users in problem.readers.items():
        home = problem.home(value)
        for u in users:
            t = on[u]
            if t == DEFAULT:
                continue
            if home in on and on[home] == t:
                uf.union(ids[u], ids[home])
            elif t in copied[value]:
                uf.union(ids[u], ids.setdefault((value, t), len(ids)))
    roots: dict[str, set[int]] = {}
    for c, t in on.items():
        if t != DEFAULT:
            roots.setdefault(t, set()).add(uf.find(ids[c]))
    return {t: len(r) for t, r in roots.items()}


def bytes_by_target(
    problem: Problem, place: Mapping[Expr, str], copied: Copied | None = None
) -> dict[str, int]:
    """Bytes each target holds: the values its calls compute, the constants bound into
    them (weights) and the values copied in."""
    held: dict[str, int] = {}
    for c in problem.calls:
        t = place.get(c, DEFAULT)
        held[t] = held.get(t, 0) + problem.bytes_of.get(c, 0) + problem.constants_of.get(c, 0)
    copied = entries(problem, place) if copied is None else copied
    for value, targets in copied.items():
        for t in targets:
            held[t] = held.get(t, 0) + problem.bytes_of.get(value, 0)
    return held


def greedy_placement(problem: Problem, targets: Sequence[str]) -> dict[Expr, str]:
    """AnnotateTarget's rule: the first target in the list that supports the call."""
    return {
        c: next((t for t in targets if t in problem.choices[c]), DEFAULT) for c in problem.calls
    }


@dataclass
class Plan:
    """One function's placement: the body placed (rewritten where that paid), its
    problem and the target of each call; and the body and problem as given."""

    body: Expr
    problem: Problem
    place: dict[Expr, str]
    given_body: Expr
    given_problem: Problem
