"""Cost models: what one e-node costs, from its op, attributes and input/output types.

A cost model is any callable `(node, child_types, out_type) -> float`; extraction sums it
over the chosen program (each shared e-class counted once by the DAG extractors). Built-in:

- `nodes`: 1 per operator call (leaves, tuples and projections are free);
- `flops`: floating-point operations from the registry, plus 1 per call so that of two
  programs with equal work the smaller one wins (reshape and transpose cost 1);
- `balanced`: FLOPs + bytes moved + 1 per call, a machine-independent proxy;
- `roofline`: estimated microseconds, max(FLOPs / peak, bytes / bandwidth) + a per-kernel
  overhead, with the machine's figures measured by `calibrate()` (`egc calibrate`) and cached
  as `machine.json` in the project's cache folder (egraph_ir/cache.py); documented defaults
  stand in until then;
- `kernels`: estimated microseconds of the kernel each node becomes, from the measured
  rates of this project's kernels (kernel_cost.py): the one layout choices are made with.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import cache_root
from ..errors import ConfigError
from ..registry import Cost
from ..types import TensorType, Type
from .graph import ENode, ctor_op, decode_attr

CostModel = Callable[[ENode, list[Type], Type], float]


def op_cost(node: ENode, child_types: list[Type], out_type: Type) -> Cost | None:
    """The registry's FLOPs and bytes for an operator node; None for leaves and tuples."""
    if not node.ctor.startswith("op_"):
        return None
    op = ctor_op(node.ctor)
    attrs = {a.name: decode_attr(s) for a, s in zip(op.attrs, node.literals, strict=True)}
    tensors = [t for t in child_types if isinstance(t, TensorType)]
    return op.cost(tensors, out_type, attrs)  # type: ignore[arg-type]


def nodes_cost(node: ENode, child_types: list[Type], out_type: Type) -> float:
    return 0.0 if op_cost(node, child_types, out_type) is None else 1.0


def flops_cost(node: ENode, child_types: list[Type], out_type: Type) -> float:
    c = op_cost(node, child_types, out_type)
    return 0.0 if c is None else 1.0 + c.flops


def balanced_cost(node: ENode, child_types: list[Type], out_type: Type) -> float:
    c = op_cost(node, child_types, out_type)
    return 0.0 if c is None else 1.0 + c.flops + c.bytes


@dataclass(frozen=True)
class Machine:
    """Figures for the roofline model: FLOP/s, bytes/s and seconds per kernel."""

    peak_flops: float = 50e9
    bandwidth: float = 10e9
    overhead_s: float = 2e-6
    measured: bool = False


def machine_file() -> Path:
    return cache_root() / "machine.json"


def load_machine() -> Machine:
    """The calibrated figures if `calibrate()` ran on this machine, else the defaults."""
    try:
        data = json.loads(machine_file().read_text())
        return Machine(
            **{k: data[k] for k in ("peak_flops", "bandwidth", "overhead_s")}, measured=True
        )
    except (OSError, ValueError, KeyError, TypeError):
        return Machine()


def calibrate(save: bool = True) -> Machine:
    """Measure peak FLOP/s (float32 matmul), copy bandwidth and per-call overhead (medians)."""

    def median_s(fn: Callable[[], Any], repeats: int) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    flops = 2.0 * 1024**3 / median_s(lambda: a @ a, 7)
    src = np.ones(16 << 20, dtype=np.float32)
    dst = np.empty_like(src)
    bandwidth = 2.0 * src.nbytes / median_s(lambda: np.copyto(dst, src), 7)
    tiny = np.ones(4, dtype=np.float32)
    overhead = median_s(lambda: np.add(tiny, tiny), 1001)
    m = Machine(flops, bandwidth, overhead, measured=True)
    if save:
        path = machine_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(m), indent=2))
    return m


class RooflineCost:
    """Estimated microseconds per kernel on a machine (see Machine)."""

    def __init__(self, machine: Machine | None = None) -> None:
        self.machine = machine or load_machine()

    def __call__(self, node: ENode, child_types: list[Type], out_type: Type) -> float:
        c = op_cost(node, child_types, out_type)
        if c is None:
            return 0.0
        m = self.machine
        seconds = max(c.flops / m.peak_flops, c.bytes / m.bandwidth) + m.overhead_s
        return 1e6 * seconds


def _checked(model: CostModel) -> CostModel:
    def cost(node: ENode, child_types: list[Type], out_type: Type) -> float:
        value = model(node, child_types, out_type)
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if not (number >= 0.0 and np.isfinite(number)):
            raise ConfigError(
                f"cost model {getattr(model, '__name__', model)!r} returned {value!r} for "
                f"an e-node {node.ctor}; costs must be finite and >= 0"
            )
        return number

    return cost


COST_MODELS: dict[str, Callable[[], CostModel]] = {
    "nodes": lambda: nodes_cost,
    "flops": lambda: flops_cost,
    "balanced": lambda: balanced_cost,
    "roofline": RooflineCost,
}  # kernel_cost.py adds "kernels"


def get_cost_model(spec: str | CostModel) -> CostModel:
    """A built-in cost model by name, or the user's callable, checked on every call:
    extraction needs finite, non-negative costs (a negative one lets a cycle look ever
    cheaper, so the search would never end)."""
    if callable(spec):
        return _checked(spec)
    try:
        return COST_MODELS[spec]()
    except KeyError:
        raise ConfigError(
            f"unknown cost model '{spec}'; known: {', '.join(COST_MODELS)} or a callable"
        ) from None
