"""3-D (NCDHW) Conv, MaxPool, AveragePool and LpPool, folded onto the 2-D ops, so video models
(Conv3d, MaxPool3d, AvgPool3d exported from PyTorch) run through the same kernels.

Depth is taken apart into its window taps: tap kd reads depths od*sd + kd*dd of the
depth-padded input for every output depth od (a strided slice). Then

- Conv: the KD taps are stacked next to the input channels of each group and the output
  depths go into the batch, so one conv2d with KD times the input channels computes the
  whole convolution: x (N, C, D, H, W) -> (N*OD, G*KD*C/G, H, W), w (O, C/G, KD, KH, KW)
  -> (O, KD*C/G, KH, KW), groups G; the result (N*OD, O, OH, OW) goes back to NCDHW.
  The stacking is one `take` of whole (channel, depth) planes with constant indices (a
  contiguous copy per plane; as a concatenation of transposed slices it ran at 0.6 GB/s).
- MaxPool: each tap pooled in 2-D with depths folded into channels, then the elementwise
  maximum of the taps (depth padding is -inf: it never wins).
- AveragePool: the sum of the taps' 2-D averages (depth padding is 0) over the number of
  taps each output depth counts (inside the input, or inside the padding too with
  count_include_pad): the 2-D average already divides by the window's height-width count,
  which is the same for every tap.

Called by the Conv, MaxPool, AveragePool (nn.py) and LpPool (nn.py)
converters for 5-D inputs.
"""

from __future__ import annotations

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from ...infer import infer_new_nodes
from ...types import TensorType
from .node import Node
from .windows import onnx_pads


class Depth:
    """The depth window of a 3-D node, and the 2-D window of each tap."""

    def __init__(
        self,
        t: TensorType,
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        dilations: tuple[int, ...],
        pads: tuple[int, ...],
        ceil_mode: bool = False,
    ) -> None:
        self.shape = t.shape
        self.dtype = t.dtype
        (self.kd, *kernel_hw), (self.sd, *strides_hw) = kernel, strides
        (self.dd, *dilation_hw) = dilations
        self.front, self.back = pads[0], pads[3]
        self.kernel, self.strides, self.dilation = (
            tuple(kernel_hw), tuple(strides_hw), tuple(dilation_hw)
        )  # fmt: skip
        self.pads_hw = (pads[1], pads[2], pads[4], pads[5])
        depth = self.shape[2]
        span = depth + self.front + self.back - self.dd * (self.kd - 1) - 1
        if span < 0:
            raise FrontendError(f"the depth window {kernel} is larger than {t}")
        self.od = (-(-span // self.sd) if ceil_mode else span // self.sd) + 1
        if ceil_mode and (self.od - 1) * self.sd >= depth + self.front:
            self.od -= 1  # the last window would start in the right padding: none
        # depth the taps reach past the padded input (ceil mode): padded like the rest
        self.overhang = max(0, (self.od - 1) * self.sd - span)

    @staticmethod
    def of(n: Node, kernel: tuple[int, ...], ceil_mode: bool = False) -> Depth:
        t = n.type()
        strides = tuple(n.attr("strides", [1, 1, 1]))
        dilations = tuple(n.attr("dilations", [1, 1, 1]))
        if not (len(kernel) == len(strides) == len(dilations) == 3):
            raise FrontendError(f"{n.op_type} on {t} needs 3 kernel sizes, strides, dilations")
        pads = onnx_pads(n, t, kernel, strides, dilations)
        return Depth(t, kernel, strides, dilations, pads, ceil_mode)

    def padded(self, x: Expr, pad_value: float) -> Expr:
        """x padded in depth: in front, behind, and past that as far as a tap reaches."""
        back = self.back + self.overhang
        if self.front or back:
            width = ((0, 0), (0, 0), (self.front, back), (0, 0), (0, 0))
            x = op.pad(x, pad_width=width, pad_value=pad_value)
        return x

    def taps(self, x: Expr, pad_value: float) -> list[Expr]:
        """Per kd, the (N, C, OD, H, W) input depths that tap kd of each window reads."""
        x = self.padded(x, pad_value)
        last = (self.od - 1) * self.sd + 1
        return [
            op.strided_slice(
                x, begin=(k * self.dd,), end=(k * self.dd + last,), strides=(self.sd,), axes=(2,)
            )
            for k in range(self.kd)
        ]

    def counted(self, inside_padding: bool) -> np.ndarray:
        """Per output depth, how many of its taps lie in the input (or in the padding)."""
        size, begin = self.shape[2], self.front
        if inside_padding:  # the padded input, which starts at the front padding
            size, begin = size + self.front + self.back, 0
        return covered((size,), (self.kd,), (self.sd,), (self.dd,), (begin,), (self.od,))


def covered(*axes: tuple[int, ...]) -> np.ndarray:
    """Per output position, how many input elements its window covers: per axis (size,
    kernel, stride, dilation, padding before, outputs), multiplied over the axes."""
    counts = np.ones((), dtype=np.int64)
    for size, k, s, d, begin, out in zip(*axes, strict=True):
        positions = np.arange(out)[:, None] * s - begin + np.arange(k)[None, :] * d
        counts = np.multiply.outer(counts, ((positions >= 0) & (positions < size)).sum(axis=1))
    return counts


def conv3d(n: Node) -> Expr:
    w_type = n.type(1)
    depth = Depth.of(n, tuple(n.attr("kernel_shape", w_type.shape[2:])))
    out = conv3d_of(n.x(), n.x(1), depth, w_type, int(n.attr("group", 1)))
    bias = n.input(2)
    return op.bias_add(out, bias, axis=1) if bias is not None else out


def conv3d_of(x: Expr, weight: Expr, depth: Depth, w_type: TensorType, groups: int) -> Expr:
    """The 3-D convolution of x (depth's shape) with weight (w_type) as one conv2d."""
    o, cg = w_type.shape[0], w_type.shape[1]
    batch, channels, _, h, w = depth.shape
    if channels != cg * groups or o % groups:
        raise FrontendError(f"Conv: input {depth.shape} and weights {w_type} with {groups} groups")
    kd, od = depth.kd, depth.od
    # the stacked planes, (N, OD, G, KD, C/G) in order, gathered from the depth-padded
    # input's (channel, depth) planes: one plane copy each
    padded = depth.padded(x, 0.0)
    dp = static_shape(padded)[2]
    o_, g_, k_, c_ = np.meshgrid(
        np.arange(od), np.arange(groups), np.arange(kd), np.arange(cg), indexing="ij"
    )
    planes = (g_ * cg + c_) * dp + o_ * depth.sd + k_ * depth.dd
    flat = op.reshape(padded, newshape=(batch, channels * dp, h, w))
    stacked = op.take(flat, Constant(planes.reshape(-1).astype("int64")), axis=1)
    stacked = op.reshape(stacked, newshape=(batch * od, groups * kd * cg, h, w))
    weights = op.transpose(weight, axes=(0, 2, 1, 3, 4))  # (O, KD, C/G, KH, KW)
    weights = op.reshape(weights, newshape=(o, kd * cg, *w_type.shape[3:]))
    out = op.conv2d(
        stacked,
        weights,
        strides=depth.strides,
        padding=depth.pads_hw,
        dilation=depth.dilation,
        groups=groups,
    )
    _, _, oh, ow = static_shape(out)
    return op.transpose(op.reshape(out, newshape=(batch, od, o, oh, ow)), axes=(0, 2, 1, 3, 4))


def pool3d(n: Node, x: Expr | None = None, include: bool | None = None) -> Expr:
    """MaxPool or AveragePool of x (default: the node's input); `include` overrides
    count_include_pad (LpPool averages |x|^p with the padding counted)."""
    ceil_mode = bool(n.attr("ceil_mode", 0))
    depth = Depth.of(n, tuple(n.attr("kernel_shape")), ceil_mode)
    batch, channels, _, h, w = depth.shape
    common = {
        "pool_size": depth.kernel,
        "strides": depth.strides,
        "padding": depth.pads_hw,
        "dilation": depth.dilation,
        "ceil_mode": ceil_mode,
    }
    is_max = n.op_type == "MaxPool"
    if include is None:
        include = bool(n.attr("count_include_pad", 0))
    pooled = []
    lowest = -np.inf if depth.dtype.startswith("float") else float(np.iinfo(depth.dtype).min)
    for tap in depth.taps(n.x() if x is None else x, lowest if is_max else 0.0):
        flat = op.reshape(tap, newshape=(batch, channels * depth.od, h, w))
        if is_max:
            pooled.append(op.max_pool2d(flat, **common))
        else:
            pooled.append(op.avg_pool2d(flat, **common, count_include_pad=include))
    out = pooled[0]
    for p in pooled[1:]:
        out = op.maximum(out, p) if is_max else op.add(out, p)
    _, _, oh, ow = static_shape(out)
    out = op.reshape(out, newshape=(batch, channels, depth.od, oh, ow))
    if is_max:
        return out
    counts = depth.counted(include).astype(depth.dtype).reshape(1, 1, depth.od, 1, 1)
    return op.divide(out, Constant(np.maximum(counts, 1)))


def static_shape(e: Expr) -> tuple[int, ...]:
    t = infer_new_nodes(e).checked_type
    assert isinstance(t, TensorType)
    return tuple(t.shape)
