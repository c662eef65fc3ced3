"""A placement cost model measured on this machine (for pm.passes.PlaceTargets).

Each distinct call (op, attributes, argument types) is timed once per target and the
result cached in a JSON file keyed by the CPU: on the host as a one-op executable
(`codegen.build`), on an external target through its registered code generator's runner.
Every target runs with the executable's thread budget. Its fixed cost per call, its
launch, is the time of a one-element add there; the launch and the copies of the op's
inputs and output are subtracted from the op times and charged per region and per copied
value instead, as the model says. What one more op costs a target however small (its per-node
dispatch, from a chain of adds) is the least an op costs there: the host fuses small ops
into one kernel, a runtime executing node by node does not. Medians of repeated runs
within a small time budget: machines are noisy, and the numbers only need to rank the
targets.

    cost = codegen.measured_cost()             # every registered external target
    mod = pm.passes.PlaceTargets(cost=cost)(mod)

The cost also carries `measure` (measure_modules): PlaceTargets builds and times its
candidate placements with it and keeps the fastest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import passmgr as pm
from egraph_ir.cache import cache_root
from egraph_ir.errors import CompilerError
from egraph_ir.expr import Call, Constant, Expr, Function, Var
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.op import call as op_call
from egraph_ir.registry import Op
from egraph_ir.types import TensorType, tensor_types

from ..external import get_external, list_externals
from ..options import default_threads
from .timer import interleaved_medians, seconds_per_run

BUDGET_S = 0.03  # seconds timing one call on one target (measure/timer.py: at least 5 runs)
ROUNDS = 3  # interleaved rounds when whole programs are timed
HOST = "default"
COPY_S_PER_BYTE = 1e-10  # memcpy at ~10 GB/s: targets here share the host's memory


def measured_cost(
    cache: Path | str | None = "",
    budget_s: float = BUDGET_S,
    threads: int = 0,
    run_candidates: bool = True,
) -> Any:
    """A pm.passes.PlacementCost whose op and launch costs are measured on first use and
    cached in a file ("": $EGC_COST_CACHE or costs.json in the project's cache folder,
    egraph_ir/cache.py; None: this process only).
    Every target runs with the executable's thread budget (`threads`; 0: all cores, as
    `codegen.num_threads`): a runtime timed on one thread looks twice as slow as it runs.
    With `run_candidates`, PlaceTargets also builds and times its candidate placements
    and keeps the fastest (passmgr/passes/partition/placement/measured.py)."""
    if cache == "":
        cache = os.environ.get("EGC_COST_CACHE") or cache_root() / "costs.json"
    store = _Cache(Path(cache).expanduser() if cache is not None else None, threads)

    def op_cost(call: Call, target: str) -> float | None:
        if not isinstance(call.op, Op):
            return None
        key = store.key(target, _signature(call))
        if key not in store.values:
            store.put(key, _time_call(call, target, budget_s, store.threads))
        value = store.values[key]
        if value is None:
            return None
        floor = _per_node(store, target, budget_s)
        moved = [a for a in call.args if not isinstance(a, Constant)] + [call]
        copies = COPY_S_PER_BYTE * sum(
            t.nbytes for m in moved for t in tensor_types(m.checked_type)
        )
        launch = _launch(store, target, budget_s, len(moved) - 1)
        return max(value - launch - copies, floor)

    def launch(target: str) -> float:
        return _launch(store, target, budget_s)

    def measure(modules: Sequence[IRModule]) -> list[float]:
        return measure_modules(modules, store.threads)

    return pm.passes.PlacementCost(
        op_cost, launch, COPY_S_PER_BYTE, measure if run_candidates else None
    )


def measure_modules(
    modules: Sequence[IRModule], threads: int, rounds: int = ROUNDS, budget_s: float = 0.1
) -> list[float]:
    """Median seconds per run of each module (built with `threads`, fed random inputs),
    timed in interleaved rounds so that a busy spell of the machine hits all alike."""
    from ..build import build

    runs: list[Callable[[], Any]] = []
    for mod in modules:
        with pm.PassContext.current().derive(config={"codegen.num_threads": threads}):
            exe = build(mod)  # as the user's context says, with the measured thread count
        rng = np.random.default_rng(0)
        feeds = [_random(rng, _tensor(p.checked_type)) for p in mod["main"].params]
        runs.append(partial(exe.run, *feeds))
    seconds = interleaved_medians(dict(enumerate(runs)), rounds=rounds, budget_s=budget_s)
    return [seconds[i] for i in range(len(runs))]


def _tensor(t: object) -> TensorType:
    if not isinstance(t, TensorType):
        raise CompilerError("only programs of tensor inputs are timed")
    return t


def _launch(store: _Cache, target: str, budget_s: float, inputs: int = 1) -> float:
    """A target's fixed cost per call with that many inputs: one-element adds of them
    there (passing each input costs too, on the host most of all)."""
    key = store.key(target, "launch" if inputs == 1 else f"launch{inputs}")
    if key not in store.values:
        store.put(key, _time_chain(1, target, budget_s, store.threads, max(inputs, 1)))
    return float(store.values[key] or 0.0)


def _per_node(store: _Cache, target: str, budget_s: float) -> float:
    """What each further op costs a target however small it is (dispatching one more
    node): a chain of 9 one-element adds less one add, per add; the least any op costs
    there (timing one op alone, less the launch, hides it)."""
    key = store.key(target, "per_node")
    if key not in store.values:
        nine = _time_chain(9, target, budget_s, store.threads) or 0.0
        store.put(key, max(nine - _launch(store, target, budget_s), 0.0) / 8)
    return float(store.values[key] or 0.0)


def _time_chain(
    length: int, target: str, budget_s: float, threads: int, inputs: int = 1
) -> float | None:
    """Seconds of `length` one-element adds on target as one region, over `inputs` inputs."""
    xs = tuple(Var(f"x{i}", TensorType((1,), "float32")) for i in range(inputs))
    body: Expr = xs[0]
    for k in range(max(length, inputs - 1)):
        body = op_call("add", body, xs[(k + 1) % inputs])
    fn = Function(xs, body)
    infer_type(fn)
    feeds = [np.ones(1, np.float32) for _ in xs]
    try:
        run = _runner(fn, feeds, target, threads)
    except Exception:  # a target that cannot run adds: no launch to measure
        return None
    return seconds_per_run(run, budget_s=budget_s)


def _signature(call: Call) -> str:
    types = ",".join(f"{'c' if isinstance(a, Constant) else ''}{a.checked_type}" for a in call.args)
    attrs = ",".join(f"{k}={v!r}" for k, v in sorted(dict(call.attrs).items()))
    return f"{call.op.name}({types}){{{attrs}}}"  # type: ignore[union-attr]


def _one_call(call: Call) -> tuple[Function, list[np.ndarray]]:
    """The call alone: its non-constant arguments as parameters, random values for them."""
    rng = np.random.default_rng(0)
    params: list[Var] = []
    args: list[Expr] = []
    feeds: list[np.ndarray] = []
    for i, a in enumerate(call.args):
        if isinstance(a, Constant):
            args.append(a)
            continue
        t = a.checked_type
        if not isinstance(t, TensorType):
            raise CompilerError("only tensor arguments are timed")
        v = Var(f"p{i}", t)
        params.append(v)
        args.append(v)
        feeds.append(_random(rng, t))
    fn = Function(tuple(params), Call(call.op, tuple(args), call.attrs))
    infer_type(fn)
    return fn, feeds


def _random(rng: np.random.Generator, t: TensorType) -> np.ndarray:
    kind = np.dtype(t.dtype).kind
    if kind == "f":
        return rng.standard_normal(t.shape).astype(t.dtype)
    if kind == "b":
        return rng.random(t.shape) < 0.5
    return rng.integers(0, 3, t.shape).astype(t.dtype)


def _time_call(call: Call, target: str, budget_s: float, threads: int) -> float | None:
    """Median seconds of one run of the call alone on target; None where it cannot run."""
    try:
        fn, feeds = _one_call(call)
        run = _runner(fn, feeds, target, threads)
    except CompilerError:
        return None
    except Exception:  # a code generator refusing the call (its own exception types)
        return None
    return seconds_per_run(run, budget_s=budget_s)


def _runner(fn: Function, feeds: list[np.ndarray], target: str, threads: int) -> Callable[[], Any]:
    """fn ready to run on target with `threads` threads (the host: a one-kernel build)."""
    if target == HOST:
        from ..build import build

        with pm.PassContext.current().derive(config={"codegen.num_threads": threads}):
            exe = build(fn)
        return lambda: exe.run(*feeds)
    if target not in list_externals():
        raise CompilerError(f"no code generator for target '{target}'")
    region = fn.with_attr("Compiler", target)
    runner = get_external(target)(region, threads)
    out_t = fn.body.checked_type
    assert isinstance(out_t, TensorType)
    outputs = [np.empty(out_t.shape, out_t.dtype)]
    return lambda: runner(feeds, outputs)


class _Cache:
    """Measured seconds by key, for this CPU, kept in a JSON file."""

    def __init__(self, path: Path | None, threads: int) -> None:
        from llvmlite import binding as llvm

        self.path, self.cpu = path, llvm.get_host_cpu_name()
        self.given_threads = threads
        self.values: dict[str, float | None] = {}
        if path is not None and path.is_file():
            try:
                self.values = json.loads(path.read_text()).get(self.cpu, {})
            except (OSError, ValueError):
                self.values = {}  # an unreadable cache is measured again

    @property
    def threads(self) -> int:
        """The given thread count, else the current context's `codegen.num_threads` (0: all
        cores), read when timing: a cost made before the user's context still obeys it."""
        ctx = pm.PassContext.current()
        return self.given_threads or int(ctx.get_config("codegen.num_threads")) or default_threads()

    def key(self, target: str, what: str) -> str:
        return f"{target}|{self.threads}t|{what}"

    def put(self, key: str, seconds: float | None) -> None:
        self.values[key] = seconds
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        except (OSError, ValueError):
            data = {}
        data.setdefault(self.cpu, {})[key] = seconds
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
        tmp.replace(self.path)
