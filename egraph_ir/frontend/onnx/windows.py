"""Convolution and pooling windows shared by the 2-D and 3-D converters: ONNX padding
(auto_pad included) and the 1-D-as-2-D lifting."""

from __future__ import annotations

from typing import Any

from ... import op
from ...errors import FrontendError
from ...expr import Expr
from ...types import TensorType
from .node import Node


def onnx_pads(n: Node, x: TensorType, kernel: tuple[int, ...], strides, dilations) -> tuple:
    """ONNX pads [begin..., end...], also from auto_pad SAME_UPPER/SAME_LOWER."""
    auto = n.attr("auto_pad", "NOTSET")
    spatial = x.ndim - 2
    if auto in ("NOTSET", "VALID"):
        return tuple(n.attr("pads", [0] * 2 * spatial)) if auto == "NOTSET" else (0,) * 2 * spatial
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise FrontendError(f"auto_pad={auto} is not supported")
    begin, end = [], []
    for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return (*begin, *end)


class Window:
    """A convolution's or pooling's input and window, 1-D (NCL) lifted to 2-D (NC1L): the
    2-D ops compute it with a window of height 1; `finish` drops the added axis again."""

    def __init__(self, n: Node, kernel: Any = None) -> None:
        t = n.type()
        if t.ndim not in (3, 4):
            raise FrontendError(
                f"only 1-D (NCL), 2-D (NCHW) and, for Conv and pooling, 3-D (NCDHW) "
                f"{n.op_type} are supported, got input {t}"
            )
        spatial = t.ndim - 2
        kernel = tuple(n.attr("kernel_shape", kernel))
        strides = tuple(n.attr("strides", [1] * spatial))
        dilations = tuple(n.attr("dilations", [1] * spatial))
        pads = onnx_pads(n, t, kernel, strides, dilations)
        self.one_d = spatial == 1
        self.x = n.x()
        if self.one_d:
            self.x = op.expand_dims(self.x, axis=2)
            kernel, strides, dilations = (1, *kernel), (1, *strides), (1, *dilations)
            pads = (0, pads[0], 0, pads[1])
        self.kernel, self.strides, self.dilations, self.pads = kernel, strides, dilations, pads

    def lift(self, e: Expr) -> Expr:
        return op.expand_dims(e, axis=2) if self.one_d else e

    def finish(self, e: Expr) -> Expr:
        return op.squeeze(e, axis=(2,)) if self.one_d else e
