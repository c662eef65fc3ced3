"""The `kernels` cost model: estimated microseconds of the kernel each e-node becomes, so
that extraction can weigh a layout conversion (bytes moved) against a faster kernel in the
other layout.

A convolution costs what its fastest kernel was measured to take on this CPU when `egc
tune` timed its exact shape and layouts (this CPU's store of kernel timings,
egraph_ir/measured.py, which the kernel chooser reads too), else its FLOPs at the measured
rate of its kind: the kernel
(conv2d in NCHW, conv2d_nchwc), its form (depthwise, strided depthwise, pointwise, other)
and, for a pointwise conv2d_nchwc, which side is blocked. The default rates are medians
over MobileNetV2's and EfficientNet-B0's layers on this project's machines (2 threads;
one table for AVX-512 hosts, one for AVX2; `benchmarks/layouts.py` measures them anew).
The int8 convolutions (qnn_conv2d, qnn_conv2d_nchwc) have rates of their own where the
host has VNNI. Elementwise and broadcast ops fuse into the kernel before them whatever the
layout, and reshapes are views or index maps, so they cost a token amount (fewer calls win
a tie); a layout conversion or a transpose is a copy that reads and writes every element;
a product runs at its measured rate.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..expr import Call
from ..measured import host_has_vnni, native_16_lanes, this_cpu
from ..registry import Op, OpPattern
from ..types import TensorType, Type
from .cost import COST_MODELS, Machine, load_machine
from .encode import canonical_attrs
from .graph import ENode, ctor_op, decode_attr

# GFLOP/s by kind (two FLOPs per multiply-add): medians over MobileNetV2's and
# EfficientNet-B0's layers, each timed alone (benchmarks/layouts.py, 2026-11-26, 2 threads),
# split at input maps of 56x56 ("@large"): blocked depthwise wins everywhere, a blocked
# result written back to NCHW loses on large maps
MEASURED_GFLOPS = {
    "conv2d": 110.0,  # NCHW, direct or channel-vector kernels
    "conv2d/pointwise": 100.0,
    "conv2d/pointwise@large": 170.0,
    "conv2d/depthwise": 45.0,
    "conv2d/depthwise@large": 66.0,
    "conv2d/depthwise-strided": 14.0,  # phase planes of a small map: mostly idle lanes
    "conv2d/depthwise-strided@large": 34.0,
    "conv2d_nchwc/pointwise": 170.0,  # blocked in and out
    "conv2d_nchwc/pointwise@large": 122.0,
    "conv2d_nchwc/pointwise-in": 170.0,  # NCHW in, blocked out
    "conv2d_nchwc/pointwise-in@large": 146.0,
    "conv2d_nchwc/pointwise-out": 130.0,  # blocked in, NCHW out (transposed in registers)
    "conv2d_nchwc/pointwise-out@large": 150.0,
    "conv2d_nchwc/depthwise": 80.0,
    "conv2d_nchwc/depthwise@large": 120.0,
    "conv2d_nchwc/depthwise-strided": 49.0,
    "conv2d_nchwc/depthwise-strided@large": 70.0,
    "conv2d_nchwc/window-in": 90.0,  # any window from NCHW data (an RGB stem) into blocks
    "conv2d_nchwc": 5.0,  # other blocked forms run their reference on the host
    # Winograd in direct-convolution FLOPs: ResNet-18's layers alone, 2 threads, 2026-11-26.
    # 2x2 tiles (2.25x fewer multiplies): 370-440 from 56x56 to 14x14, 290-300 at 7x7 (512
    # channels: reading 16 MB of transformed weights); 4x4 tiles (4x fewer): 690-710 at
    # 56x56 and 28x28, 440 at 14x14, 230 at 7x7 (37 MB of weights)
    "conv2d_winograd": 290.0,
    "conv2d_winograd@large": 370.0,
    "conv2d_winograd/4": 230.0,
    "conv2d_winograd/4@large": 690.0,
    # products on packed constant weights (a ViT's 196x768 by 768x192: 200-210 GFLOP/s
    # alone, 2 threads), a little below that for the smaller ones a model also has
    "dense": 150.0,
    "matmul": 150.0,
}
# The same kinds on a host without AVX-512 (a Zen 3, AVX2 + FMA, 2 threads, 2026-11-30:
# benchmarks/layouts.py over both models' layers, benchmarks/winograd.py, the packed
# product on GPT-2's and BERT's shapes). Not a uniform scaling of the table above: a
# 16-lane vector is two registers here, so NCHW results cannot be transposed in registers
# (a blocked result written back to NCHW loses more) and large NCHW pointwise layers run
# at a third of their AVX-512 rate; with the AVX-512 table an AVX2 host kept MobileNetV2's
# 112x112 layers in NCHW and ran it 10-13% slower (batch 1 and 8, measured in one process).
AVX2_GFLOPS = {
    "conv2d": 58.0,
    "conv2d/pointwise": 35.0,
    "conv2d/pointwise@large": 48.0,
    "conv2d/depthwise": 28.0,
    "conv2d/depthwise@large": 37.0,
    "conv2d/depthwise-strided": 11.0,
    "conv2d/depthwise-strided@large": 19.0,
    "conv2d_nchwc/pointwise": 91.0,
    "conv2d_nchwc/pointwise@large": 93.0,
    "conv2d_nchwc/pointwise-in": 74.0,
    "conv2d_nchwc/pointwise-in@large": 84.0,
    "conv2d_nchwc/pointwise-out": 74.0,  # the tile's pixels stored plane by plane
    "conv2d_nchwc/pointwise-out@large": 52.0,
    "conv2d_nchwc/depthwise": 31.0,
    "conv2d_nchwc/depthwise@large": 36.0,
    "conv2d_nchwc/depthwise-strided": 20.0,
    "conv2d_nchwc/depthwise-strided@large": 26.0,
    "conv2d_nchwc/window-in": 78.0,
    "conv2d_nchwc": 5.0,
    # ResNet-18's layers: 2x2 tiles 187 at 56x56, 135-137 at 28x28 and 14x14, 77 at 7x7;
    # 4x4 tiles 248-249 at 56x56 and 28x28, 147 at 14x14, 78 at 7x7
    "conv2d_winograd": 135.0,
    "conv2d_winograd@large": 187.0,
    "conv2d_winograd/4": 147.0,
    "conv2d_winograd/4@large": 249.0,
    "dense": 110.0,  # 95-127 on 64-128 rows of GPT-2 small and BERT-base
    "matmul": 110.0,
}


# The int8 convolutions (GOP/s, two per multiply-add) on a host with VNNI: medians over
# MobileNetV2's uint8 layers as they run in the model (per-kernel profile, 2 threads, Zen 4,
# 2026-11-30), NCHW kernels and blocked ones. Small-map depthwise layers are not here:
# CanonicalizeQnn computes those in float32 (the float kinds above price them). Without
# VNNI a blocked int8 convolution has no kernel (its reference runs on the host).
INT8_GOPS = {
    "qnn_conv2d": 280.0,  # a full window (an RGB stem)
    "qnn_conv2d/pointwise": 450.0,
    "qnn_conv2d/pointwise@large": 400.0,
    "qnn_conv2d/depthwise": 60.0,
    "qnn_conv2d/depthwise@large": 80.0,
    "qnn_conv2d/depthwise-strided": 35.0,
    "qnn_conv2d/depthwise-strided@large": 40.0,
    "qnn_conv2d_nchwc/pointwise": 550.0,
    "qnn_conv2d_nchwc/pointwise@large": 500.0,
    "qnn_conv2d_nchwc/pointwise-in": 450.0,
    "qnn_conv2d_nchwc/pointwise-out": 450.0,
    "qnn_conv2d_nchwc/pointwise-out@large": 400.0,
    "qnn_conv2d_nchwc/depthwise": 130.0,
    "qnn_conv2d_nchwc/depthwise@large": 155.0,
    "qnn_conv2d_nchwc/depthwise-strided": 80.0,
    "qnn_conv2d_nchwc/depthwise-strided@large": 105.0,
    "qnn_conv2d_nchwc/window-in": 300.0,  # an RGB stem into blocks
    "qnn_conv2d_nchwc": 5.0,
}
INT8_WITHOUT_VNNI = {"qnn_conv2d": 150.0, "qnn_conv2d_nchwc": 5.0}


def default_gflops() -> dict[str, float]:
    """The rates measured on a host with this one's vector registers."""
    rates = dict(MEASURED_GFLOPS if native_16_lanes() else AVX2_GFLOPS)
    return rates | (INT8_GOPS if host_has_vnni() else INT8_WITHOUT_VNNI)


VIEWS = ("reshape", "flatten", "squeeze", "expand_dims")  # a view or an index map: no copy
# GB/s (read + write) of a copy kernel: layout conversions and transposes each alone,
# 2 threads: 25-36 GB/s from 150 KB to 1.6 MB (a 14x14 map's 2 us is mostly the call)
COPY_GBS = 25.0
COPIES = ("layout_transform", "transpose")
LARGE_MAP = 56 * 56  # input pixels from which a layer's rate is its kind's "@large" one
FUSED_US = 0.01  # an op fused into a kernel's epilogue
CONVOLUTIONS = ("conv2d", "conv2d_nchwc", "conv2d_winograd", "qnn_conv2d", "qnn_conv2d_nchwc")
BLOCKED = ("conv2d_nchwc", "qnn_conv2d_nchwc")
# from these maps on, Winograd's tiles fill its register blocks (by tile size)
LARGE_WINOGRAD = {2: 14 * 14, 4: 28 * 28}


def cpu_name() -> str:
    """What the measurements are valid for: the processor's model name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def conv_kind(name: str, x: Type, w: Type, attrs: Mapping[str, Any]) -> str:
    """'conv2d/depthwise', 'conv2d_nchwc/pointwise-out@large', ...: the kernel, its form,
    for a pointwise conv2d_nchwc with one plain side which one, and whether its input map
    is large."""
    if not (isinstance(x, TensorType) and isinstance(w, TensorType)):
        return name
    if name == "conv2d_winograd":
        tile = int(attrs.get("tile_size", 2))
        large = x.shape[2] * x.shape[3] >= LARGE_WINOGRAD.get(tile, 0)
        return name + ("" if tile == 2 else f"/{tile}") + ("@large" if large else "")
    channels = x.shape[1] * (x.shape[4] if x.ndim == 5 else 1)
    strided = any(s > 1 for s in attrs["strides"])
    form = ""
    if attrs["groups"] == channels > 1 and w.shape[1] == 1:
        form = "/depthwise-strided" if strided else "/depthwise"
    elif attrs["groups"] == 1 and w.shape[2:] == (1, 1) and not strided:
        form = "/pointwise"
        if name in BLOCKED and attrs["data_layout"] == "NCHW":
            form += "-in"
        elif name in BLOCKED and attrs["out_layout"] == "NCHW":
            form += "-out"
    elif name in BLOCKED and attrs["groups"] == 1 and attrs["data_layout"] == "NCHW":
        form = "/window-in"
    size = "@large" if form and x.shape[2] * x.shape[3] >= LARGE_MAP else ""
    return name + form + size


def kernel_key(name: str, x: TensorType, w: TensorType, attrs: Mapping[str, Any]) -> str:
    """One convolution's shape, attributes and layouts, as `egc tune` files its time."""
    parts = [f"x={'x'.join(map(str, x.shape))}", f"w={'x'.join(map(str, w.shape))}"]
    for a in ("strides", "padding", "dilation", "groups", "data_layout", "out_layout", "tile_size"):
        if a in attrs:
            value = attrs[a]
            text = "x".join(map(str, value)) if isinstance(value, tuple | list) else str(value)
            parts.append(f"{a}={text}")
    return f"{name}({','.join(parts)})"


def call_key(call: Call) -> str:
    """kernel_key of a typed convolution call, its attributes in the encoder's canonical
    form: the key the cost model, `egc tune` and the kernel chooser share."""
    x, w = (a.checked_type for a in call.args[:2])
    assert isinstance(x, TensorType) and isinstance(w, TensorType) and isinstance(call.op, Op)
    return kernel_key(call.op.name, x, w, canonical_attrs(call))


@dataclass
class KernelCost:
    """Estimated microseconds per e-node (see the module docstring)."""

    machine: Machine = field(default_factory=load_machine)
    gflops: dict[str, float] = field(default_factory=default_gflops)
    times: dict[str, float] = field(default_factory=dict)
    measured: bool = True  # read this CPU's `egc tune` measurements
    copy_gbs: float = COPY_GBS

    def __post_init__(self) -> None:
        if self.measured:
            store = this_cpu()
            self.gflops = {**self.gflops, **store.rates}
            self.times = {**store.best_seconds(), **self.times}

    def __call__(self, node: ENode, child_types: list[Type], out_type: Type) -> float:
        if not node.ctor.startswith("op_"):
            return 0.0
        op = ctor_op(node.ctor)
        attrs = {a.name: decode_attr(s) for a, s in zip(op.attrs, node.literals, strict=True)}
        return self.estimate(op, child_types, out_type, attrs)

    def estimate(self, op: Op, child_types: list[Type], out_type: Type, attrs: Mapping) -> float:
        """Microseconds of one call (the profile sets these beside the measured times)."""
        tensors = [t for t in child_types if isinstance(t, TensorType)]
        c = op.cost(tensors, out_type, attrs)  # type: ignore[arg-type]
        overhead = 1e6 * self.machine.overhead_s
        if op.name in CONVOLUTIONS:
            x, w = child_types[:2]
            if isinstance(x, TensorType) and isinstance(w, TensorType):
                seconds = self.times.get(kernel_key(op.name, x, w, attrs))
                if seconds is not None:
                    return 1e6 * seconds
            kind = conv_kind(op.name, x, w, attrs)
            rate = self.gflops.get(kind) or self.gflops.get(kind.split("@")[0])
            rate = rate or self.gflops[op.name]
            return c.flops / (rate * 1e3) + overhead
        if op.name in COPIES:
            return c.bytes / (self.copy_gbs * 1e3) + overhead
        if op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST) or op.name in VIEWS:
            return FUSED_US
        if op.name in self.gflops:  # a product at its measured rate
            return c.flops / (self.gflops[op.name] * 1e3) + overhead
        seconds = max(c.flops / self.machine.peak_flops, c.bytes / self.machine.bandwidth)
        return 1e6 * seconds + overhead


COST_MODELS["kernels"] = KernelCost
