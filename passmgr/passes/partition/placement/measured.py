"""Choosing a placement by running it, when the cost model can measure (`cost.measure`;
codegen.measured_cost() gives one).

Op costs measured one op at a time miss what a target gains inside a region: ONNX Runtime
fuses a convolution with its bias and activation and keeps a blocked layout from one
convolution to the next, and a whole model streams its weights from memory where one op
timed alone finds them in cache. So the model's answer is checked against real runs:

1. candidates: the integer program's placement, everything on the host, and each target's
   first-fit placement (AnnotateTarget's answer with that target alone);
2. calibration: the host-only run scales host costs (measured / modelled); each
   single-target run then scales that target's op and launch costs (what its run took
   beyond its host part, over what the model gave it); the program is solved again under
   the calibrated costs and that placement becomes a candidate too;
3. every distinct candidate is built and timed in interleaved rounds (`cost.measure`), and
   the fastest wins.

The chosen build is therefore never slower than the best single-target build beyond the
noise of timing, and a mixed placement wins wherever one really runs faster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from egraph_ir.errors import CompilerError
from egraph_ir.expr import Expr
from egraph_ir.module import IRModule

from ....run import separate_run
from ..regions import DEFAULT
from .model import PlacementCost, Plan, Problem, cost_by_target, greedy_placement
from .solve import solve

log = logging.getLogger(__name__)
Placed = dict[str, tuple[Expr, Mapping[Expr, str]]]  # function name -> (body, {call: target})
SCALE_RANGE = (0.05, 20.0)  # calibration factors are clamped: one noisy run must not flip all
Partition = Callable[[IRModule, Placed], IRModule]  # the module partitioned as placed


@dataclass(frozen=True)
class RunChoice:
    """The placement that ran fastest, its candidate's name and every candidate's time."""

    placed: Placed
    chosen: str
    ms: dict[str, float]
    failed: bool = False  # the runs failed: the model's placement is kept


def choose_by_running(
    mod: IRModule,
    plans: Mapping[str, Plan],
    targets: Sequence[str],
    cost: PlacementCost,
    partition: Partition,
) -> RunChoice:
    """The candidate placement (see the module docstring) that runs fastest."""
    assert cost.measure is not None
    placed: Placed = {n: (p.body, p.place) for n, p in plans.items()}
    host: Placed = {n: (p.given_body, {}) for n, p in plans.items()}
    candidates: dict[str, Placed] = {"placed": placed, "host": host}
    for t in targets:
        candidates[t] = {
            n: (p.given_body, greedy_placement(p.given_problem, [t])) for n, p in plans.items()
        }
    modules = {k: _candidate(mod, v, partition) for k, v in candidates.items()}
    try:
        first = dict(zip(modules, cost.measure(list(modules.values())), strict=True))
    except CompilerError as exc:  # a program the measure cannot build or feed
        log.warning("PlaceTargets keeps the model's placement: the runs failed: %s", exc)
        return RunChoice(placed, "placed", {}, failed=True)
    scale = _calibration(plans, candidates, first, targets, cost)
    calibrated: Placed = {
        n: (p.body, solve(_scaled(p.problem, scale), _scaled_cost(cost, scale)))
        for n, p in plans.items()
    }
    if not any(_same(calibrated, other) for other in candidates.values()):
        modules["calibrated"] = _candidate(mod, calibrated, partition)
        candidates["calibrated"] = calibrated
    best_first = min(first, key=first.__getitem__)
    final = [best_first, *(["calibrated"] if "calibrated" in modules else [])]
    seconds = dict(zip(final, cost.measure([modules[k] for k in final]), strict=True))
    ms = {name: value * 1e3 for name, value in first.items()}
    if "calibrated" in seconds:
        ms["calibrated"] = seconds["calibrated"] * 1e3
    chosen = min(seconds, key=seconds.__getitem__)
    return RunChoice(candidates[chosen], chosen, ms)


def _candidate(mod: IRModule, placed: Placed, partition: Partition) -> IRModule:
    """A candidate partitioned in a run of its own: its annotation and partition reports
    are not the pass's (the chosen one is partitioned again by the pass)."""
    with separate_run():
        return partition(mod, placed)


def _calibration(
    plans: Mapping[str, Plan],
    candidates: Mapping[str, Placed],
    seconds: Mapping[str, float],
    targets: Sequence[str],
    cost: PlacementCost,
) -> dict[str, float]:
    """Per target (and the host), measured over modelled seconds."""

    def modelled(name: str) -> dict[str, float]:
        total: dict[str, float] = {}
        for fn, plan in plans.items():
            problem = plan.problem if name == "placed" else plan.given_problem
            for t, v in cost_by_target(problem, candidates[name][fn][1], cost).items():
                total[t] = total.get(t, 0.0) + v
        return total

    host_model = modelled("host")[DEFAULT]
    scale = {DEFAULT: _clamp(seconds["host"] / host_model) if host_model > 0 else 1.0}
    for t in targets:
        split = modelled(t)
        on_t = split.get(t, 0.0)
        if on_t <= 0:
            scale[t] = 1.0  # the target took nothing: nothing to learn
            continue
        scale[t] = _clamp((seconds[t] - scale[DEFAULT] * split[DEFAULT]) / on_t)
    return scale


def _clamp(x: float) -> float:
    return min(max(x, SCALE_RANGE[0]), SCALE_RANGE[1])


def _scaled(problem: Problem, scale: Mapping[str, float]) -> Problem:
    choices = {
        c: {t: v * scale.get(t, 1.0) for t, v in o.items()} for c, o in problem.choices.items()
    }
    return Problem(
        problem.calls, choices, problem.readers, problem.outputs, problem.bytes_of, problem.homes
    )


def _scaled_cost(cost: PlacementCost, scale: Mapping[str, float]) -> PlacementCost:
    def launch(t: str) -> float:
        return cost.launch_of(t) * scale.get(t, 1.0)

    return replace(cost, launch=launch)


def _same(a: Placed, b: Placed) -> bool:
    """Whether two placements put the same bodies' calls on the same targets."""
    if a.keys() != b.keys():
        return False
    for name, (body, place) in a.items():
        other_body, other_place = b[name]
        if body is not other_body:
            return False
        off_host = {c: t for c, t in place.items() if t != DEFAULT}
        if off_host != {c: t for c, t in other_place.items() if t != DEFAULT}:
            return False
    return True
