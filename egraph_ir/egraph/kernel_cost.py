"""The `kernels` cost model: estimated microseconds of the kernel each e-node becomes, from
the rates this project's kernels were measured to reach, so that extraction can weigh a
layout conversion (bytes moved) against a faster kernel in the other layout.

Rates are multiply-add throughputs per kernel kind, measured on the real models' layers
(benchmarks/layouts.py prints them for this machine; 2 threads, AVX-512). Elementwise and
broadcast ops fuse into the kernel before them whatever the layout, so they cost a token
amount (fewer calls win a tie); a layout conversion is a kernel of its own that reads and
writes every element once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..registry import OpPattern
from ..types import TensorType, Type
from .cost import COST_MODELS, Machine, load_machine, op_cost
from .graph import ENode, ctor_op, decode_attr

# GFLOP/s per kernel kind (two multiply-add FLOPs), medians over MobileNetV2's and
# EfficientNet-B0's layers of each kind, 2 threads (benchmarks/layouts.py).
MEASURED_GFLOPS = {
    "conv2d": 90.0,  # NCHW, direct or channel-vector kernels
    "conv2d/pointwise": 95.0,
    "conv2d/depthwise": 50.0,
    "conv2d/depthwise-strided": 21.0,  # phase planes, a quarter of the lanes' loads reused
    "conv2d_nchwc/pointwise": 150.0,
    "conv2d_nchwc/depthwise": 80.0,
    "conv2d_nchwc/depthwise-strided": 45.0,
    "conv2d_nchwc": 5.0,  # other blocked forms run their reference on the host
}
FUSED_US = 0.01  # an op fused into a kernel's epilogue


@dataclass
class KernelCost:
    """Estimated microseconds per e-node (see the module docstring)."""

    machine: Machine = field(default_factory=load_machine)
    gflops: dict[str, float] = field(default_factory=lambda: dict(MEASURED_GFLOPS))

    def __call__(self, node: ENode, child_types: list[Type], out_type: Type) -> float:
        c = op_cost(node, child_types, out_type)
        if c is None:
            return 0.0
        op = ctor_op(node.ctor)
        attrs = {a.name: decode_attr(s) for a, s in zip(op.attrs, node.literals, strict=True)}
        if op.name in ("conv2d", "conv2d_nchwc"):
            kind = op.name + _conv_kind(op.name, child_types, attrs)
            rate = self.gflops.get(kind, self.gflops[op.name])
            return c.flops / (rate * 1e3) + 1e6 * self.machine.overhead_s
        if op.name == "layout_transform":
            return c.bytes / self.machine.bandwidth * 1e6 + 1e6 * self.machine.overhead_s
        if op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST):
            return FUSED_US
        seconds = max(c.flops / self.machine.peak_flops, c.bytes / self.machine.bandwidth)
        return 1e6 * (seconds + self.machine.overhead_s)


def _conv_kind(name: str, child_types: list[Type], attrs: dict) -> str:
    """'/depthwise' (one channel per group; '-strided' with a stride), '/pointwise' (1x1,
    one group, no stride), or ''."""
    x, w = child_types[:2]
    if not (isinstance(x, TensorType) and isinstance(w, TensorType)):
        return ""
    channels = x.shape[1] * (x.shape[4] if name == "conv2d_nchwc" else 1)
    strided = any(s > 1 for s in attrs["strides"])
    if attrs["groups"] == channels > 1 and w.shape[1] == 1:
        return "/depthwise-strided" if strided else "/depthwise"
    if attrs["groups"] == 1 and w.shape[2:] == (1, 1) and not strided:
        return "/pointwise"
    return ""


COST_MODELS["kernels"] = KernelCost
