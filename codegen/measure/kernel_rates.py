"""Measured convolution kernels for the `kernels` cost model (egraph_ir/egraph/kernel_cost.py)
that decides where blocked layouts pay: `egc tune` runs `measure` on the model it tunes.

Each distinct conv2d of the model (optimised without blocked layouts) is built alone in
NCHW and in every blocked form blocked.rules can give it (a depthwise one blocked in and
out; a pointwise one blocked in and out, NCHW in, or NCHW out, as its channels allow; a
3x3 one by Winograd's algorithm where kernels.rules would make it); the
forms are timed in alternating rounds with the executable's thread budget (the least of
the round medians: a busy machine only adds time). The times are filed by exact shape and
layouts, and the median GFLOP/s of each kind stands in for shapes not measured; both are
saved for this CPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import passmgr as pm
from egraph_ir.egraph.encode import canonical_attrs
from egraph_ir.egraph.kernel_cost import call_key, conv_kind, kernel_key
from egraph_ir.expr import Call, Constant, Function, Var
from egraph_ir.frontend import from_onnx
from egraph_ir.infer import infer_type
from egraph_ir.measured import KernelTimes, default_path
from egraph_ir.module import IRModule
from egraph_ir.op import call as op_call
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order

from ..build import Executable, build, optimise
from .timer import interleaved_medians

BLOCK = 16
BLOCKED, PLAIN = "NCHW16c", "NCHW"


@dataclass
class KernelRates:
    """Seconds per shape key and kernel NAME, GFLOP/s per kind (median over its layers),
    where saved."""

    times: dict[str, dict[str, float]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    layers: dict[str, list[float]] = field(default_factory=dict)
    path: Path | None = None

    def rows(self) -> list[list[str]]:
        return [
            [kind, f"{rate:.1f}", str(len(self.layers.get(kind, ())))]
            for kind, rate in sorted(self.rates.items())
        ]

    HEADER = ("kernel kind", "GFLOP/s", "layers")


def convolutions(mod: IRModule) -> list[Call]:
    """Distinct conv2d calls with constant float32 weights (one per shape and attributes)."""
    seen: dict[str, Call] = {}
    for fn in mod.functions.values():
        for node in post_order(fn):
            if not (isinstance(node, Call) and getattr(node.op, "name", "") == "conv2d"):
                continue
            x_t, w = node.args[0].checked_type, node.args[1]
            if isinstance(w, Constant) and isinstance(x_t, TensorType) and x_t.dtype == "float32":
                w_t = TensorType(w.data.shape, "float32")
                seen.setdefault(kernel_key("conv2d", x_t, w_t, node.attrs), node)
    return list(seen.values())


def forms(conv: Call) -> list[Call]:
    """The convolution alone on a parameter, in NCHW and in each blocked form it has."""
    x_t, w = conv.args[0].checked_type, conv.args[1]
    assert isinstance(x_t, TensorType) and isinstance(w, Constant)
    n, c, h, wd = x_t.shape
    o = w.data.shape[0]
    form = conv_kind("conv2d", x_t, TensorType(w.data.shape, "float32"), conv.attrs)
    form = form.split("@")[0]
    layouts = []
    if form in ("conv2d/depthwise", "conv2d/depthwise-strided"):
        layouts = [(BLOCKED, BLOCKED)] if c % BLOCK == 0 else []
    elif form == "conv2d" and conv.attrs["groups"] == 1 and c < BLOCK and o % BLOCK == 0:
        layouts = [(PLAIN, BLOCKED)]  # a stem: any window from NCHW into blocks
    elif form == "conv2d/pointwise":
        both = [(BLOCKED, BLOCKED)] if c % BLOCK == 0 and o % BLOCK == 0 else []
        into = [(PLAIN, BLOCKED)] if o % BLOCK == 0 else []
        out = [(BLOCKED, PLAIN)] if c % BLOCK == 0 else []
        layouts = both + into + out
    calls = [_alone("conv2d", x_t.shape, w, conv.attrs)]
    for data, result in layouts:
        shape = (n, c // BLOCK, h, wd, BLOCK) if data == BLOCKED else x_t.shape
        attrs = {**conv.attrs, "data_layout": data, "out_layout": result}
        calls.append(_alone("conv2d_nchwc", shape, w, attrs))
    for tile in (2, 4) if _winograd_form(conv) else ():  # kernels.rules' conv2d-winograd(-4)
        attrs = {"padding": conv.attrs["padding"], "data_layout": BLOCKED, "out_layout": BLOCKED}
        attrs["tile_size"] = tile
        calls.append(_alone("conv2d_winograd", (n, c // BLOCK, h, wd, BLOCK), w, attrs))
    return calls


def _winograd_form(conv: Call) -> bool:
    """The convolutions kernels.rules computes by Winograd's algorithm (its guards)."""
    x_t, w = conv.args[0].checked_type, conv.args[1]
    assert isinstance(x_t, TensorType) and isinstance(w, Constant)
    o, c, kh, kw = w.data.shape
    a = canonical_attrs(conv)  # as the rules see it: strides (1,) is (1, 1)
    return (
        (kh, kw) == (3, 3)
        and a["strides"] == (1, 1)
        and a["dilation"] == (1, 1)
        and a["groups"] == 1
        and c % BLOCK == 0
        and o % BLOCK == 0
    )


def _alone(name: str, shape: tuple[int, ...], w: Constant, attrs: Mapping[str, Any]) -> Call:
    x = Var("x", TensorType(shape, "float32"))
    fn = infer_type(Function((x,), op_call(name, x, w, **attrs)))
    assert isinstance(fn, Function) and isinstance(fn.body, Call)
    return fn.body


def _runner(call: Call) -> tuple[Callable[[], Any], str]:
    """One run of the call alone, on random input, and the NAME of the kernel it runs."""
    x = call.args[0]
    assert isinstance(x, Var)
    exe = build(Function((x,), call))
    assert isinstance(exe, Executable)  # a probe of static shapes
    t = x.checked_type
    assert isinstance(t, TensorType)
    inputs = {"x": np.random.default_rng(0).standard_normal(t.shape).astype("float32")}
    names = [k.kernel_name for k in exe.graph.kernels() if k.kind == "conv"]
    return partial(exe.run, **inputs), names[0] if names else "host"


def _key(call: Call) -> tuple[str, str, float]:
    """(kernel key, kind, FLOPs) of a call built by `forms`."""
    x_t, w_t, out = (a.checked_type for a in (*call.args, call))
    assert isinstance(x_t, TensorType) and isinstance(w_t, TensorType)
    assert isinstance(out, TensorType)
    name = call.op.name  # type: ignore[union-attr]
    flops = 2.0 * float(np.prod(out.shape)) * float(np.prod(w_t.shape[1:]))
    return call_key(call), conv_kind(name, x_t, w_t, call.attrs), flops


def measure(model: Any, rounds: int = 5) -> KernelRates:
    """Time every form of every distinct convolution of `model` (see the module doc)."""
    mod = model if isinstance(model, IRModule) else from_onnx(model)
    with pm.PassContext(opt_level=3, config={"layout.blocked": False}):
        mod = optimise(mod, None)
    result = KernelRates()
    for conv in convolutions(mod):
        calls = forms(conv)
        runners = [_runner(c) for c in calls]
        runs = {k: run for k, (run, _) in enumerate(runners)}
        measured = interleaved_medians(runs, rounds=rounds, per_round=20)
        for k, call in enumerate(calls):
            key, kind, flops = _key(call)
            seconds = measured[k]
            result.times.setdefault(key, {})[runners[k][1]] = seconds
            result.layers.setdefault(kind, []).append(flops / seconds / 1e9)
    result.rates = {kind: statistics.median(v) for kind, v in result.layers.items()}
    return result


def measure_and_save(model: Any, rounds: int = 5, path: str | Path | None = None) -> KernelRates:
    """`measure`, then merged into this CPU's store of kernel timings (or the store at
    `path`), which later compiles read."""
    result = measure(model, rounds)
    store = KernelTimes.open(Path(path) if path is not None else default_path())
    for key, seconds in result.times.items():
        store.record(key, seconds)
    store.rates.update(result.rates)
    store.save()
    result.path = store.path
    return result
