"""The shapes the blocked convolution tests draw (test_nchwc.py for float32, test_nchwc_int8.py
for bytes): one set of depthwise and pointwise geometries for both kernels' families."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import strategies as st


class Depthwise(NamedTuple):
    c: int  # channels, whole blocks of 16
    kernel: int
    strides: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, ...]
    n: int
    h: int
    w: int

    @property
    def blocked(self) -> tuple[int, ...]:
        """The data's NCHW16c shape."""
        return (self.n, self.c // 16, self.h, self.w, 16)


class Pointwise(NamedTuple):
    data_blocked: bool
    out_blocked: bool
    c: int
    o: int
    n: int
    h: int
    w: int

    @property
    def data_shape(self) -> tuple[int, ...]:
        n, c, h, w = self.n, self.c, self.h, self.w
        return (n, c // 16, h, w, 16) if self.data_blocked else (n, c, h, w)

    @property
    def layouts(self) -> dict[str, str]:
        blocked = {True: "NCHW16c", False: "NCHW"}
        return {"data_layout": blocked[self.data_blocked], "out_layout": blocked[self.out_blocked]}


@st.composite
def depthwise_geometry(draw: st.DrawFn) -> Depthwise:
    """Kernels 1, 3, 5; strides, dilation and (asymmetric) padding; maps at least a window."""
    c = 16 * draw(st.integers(1, 3))
    kernel = draw(st.sampled_from([1, 3, 5]))
    strides = draw(st.sampled_from([(1, 1), (2, 2), (1, 2)]))
    dilation = draw(st.sampled_from([(1, 1), (1, 1), (2, 2)]))
    padding = draw(st.sampled_from([(0,), (1,), (2,), (0, 1, 2, 0)]))
    n = draw(st.integers(1, 2))
    h = draw(st.integers(kernel * dilation[0], 19))
    w = draw(st.integers(kernel * dilation[1], 19))
    return Depthwise(c, kernel, strides, dilation, padding, n, h, w)


@st.composite
def pointwise_geometry(draw: st.DrawFn) -> Pointwise:
    """Blocked in and out, or one side NCHW with any channel count (24, 40: the residual
    streams a chain enters blocked data from or leaves it to)."""
    data_blocked, out_blocked = draw(st.sampled_from([(True, True), (False, True), (True, False)]))
    c = 16 * draw(st.integers(1, 4)) if data_blocked else draw(st.sampled_from([3, 16, 24, 40]))
    o = 16 * draw(st.integers(1, 5)) if out_blocked else draw(st.sampled_from([8, 24, 40, 64]))
    n = draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 15)), draw(st.integers(1, 15))
    return Pointwise(data_blocked, out_blocked, c, o, n, h, w)
