"""The convolution with output channels in the vector lanes (codegen/lower/kernels/conv/channels.py):
chosen for small feature maps only, and equal to the interpreter for every form it takes
(strides, padding, dilation, batches, partial pixel blocks, fused epilogues)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.lower.kernels.conv.channels import ChannelConv
from codegen.lower.kernels.conv.direct import DirectConv
from codegen.lower.select import CHOOSERS
from egraph_ir import op
from egraph_ir.testing import assert_allclose


def _conv(n: int, c: int, side: int, o: int, kernel: int, **attrs: object) -> ir.Call:
    x = ir.var("x", shape=(n, c, side, side))
    w = ir.const(np.zeros((o, c, kernel, kernel), "float32"))
    return ir.infer_type(ir.Function([x], op.conv2d(x, w, **attrs))).body


@pytest.mark.parametrize(
    "shape, kernel, attrs, chosen",
    [
        ((192, 7), 1, {}, ChannelConv),  # EfficientNet-B0's 7x7 expansions
        ((112, 14), 1, {}, ChannelConv),
        ((512, 7), 3, {"padding": (1,)}, ChannelConv),  # ResNet-18's last stage
        ((128, 28), 3, {"padding": (1,)}, ChannelConv),  # padded rows leave lanes idle
        ((128, 28), 3, {"padding": (1,), "strides": (2,)}, ChannelConv),
        ((64, 56), 3, {"padding": (1,)}, DirectConv),  # the tile would leave the cache
        ((40, 28), 1, {}, DirectConv),  # 28x28 rows fill whole vectors
        ((16, 7), 1, {}, DirectConv),  # too few multiply-adds per output
    ],
)
def test_lanes_over_channels_only_where_they_were_measured_faster(
    shape: tuple[int, int], kernel: int, attrs: dict, chosen: type
) -> None:
    c, side = shape
    assert isinstance(CHOOSERS["conv2d"](_conv(1, c, side, 64, kernel, **attrs)), chosen)


def test_output_channels_that_are_not_whole_vectors_stay_direct() -> None:
    assert isinstance(CHOOSERS["conv2d"](_conv(1, 192, 7, 40, 1)), DirectConv)


@st.composite
def channel_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    kernel = draw(st.sampled_from([1, 2, 3]))
    c = draw(st.integers(64 // kernel**2 + 1, 80))
    o = 16 * draw(st.integers(1, 4))
    strides = draw(st.sampled_from([(1, 1), (2, 2), (1, 2)]))
    dilation = draw(st.sampled_from([(1, 1), (2, 2)]))
    padding = draw(st.sampled_from([(0,), (1,), (1, 2), (0, 1, 2, 0)]))
    n = draw(st.integers(1, 2))
    h = draw(st.integers(kernel * dilation[0] + 1, 15))
    w = draw(st.integers(kernel * dilation[1] + 1, 15))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=(n, c, h, w))
    # weights scaled as a trained layer's (variance 1 / fan-in), so outputs are O(1): the
    # float32 sums of up to 720 products then differ from numpy's by ~1e-6, inside the
    # default tolerance (unscaled, a cancelling output near 0.02 is off by 2e-5)
    scale = 1.0 / np.sqrt(c * kernel * kernel)
    weights = ir.const((rng.standard_normal((o, c, kernel, kernel)) * scale).astype("float32"))
    body = op.conv2d(x, weights, strides=strides, padding=padding, dilation=dilation)
    epilogue = draw(st.sampled_from(["none", "bias_relu", "swish", "residual"]))
    params, inputs = [x], {"x": rng.standard_normal((n, c, h, w)).astype("float32")}
    if epilogue == "bias_relu":
        bias = ir.const(rng.standard_normal(o).astype("float32"))
        body = op.relu(op.bias_add(body, bias, axis=1))
    elif epilogue == "swish":
        body = op.multiply(body, op.sigmoid(body))
    elif epilogue == "residual":
        out_t = ir.infer_type(ir.Function([x], body)).body.checked_type
        skip = ir.var("skip", shape=out_t.shape)
        params.append(skip)
        inputs["skip"] = rng.standard_normal(out_t.shape).astype("float32")
        body = op.add(body, skip)
    return ir.Function(params, body), inputs


@given(channel_cases())
def test_every_form_the_channel_kernel_takes_matches_the_interpreter(case) -> None:
    fn, inputs = case
    exe = codegen.build(fn)
    assert "host" not in exe.kernel_kinds()
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))


def test_a_small_map_runs_the_channel_kernel_and_agrees() -> None:
    """ResNet-18's last-stage shape with its epilogue, batch 2, 7x7: the selected kernel
    is the channel-lane one (its tile is in the generated code) and it agrees."""
    rng = np.random.default_rng(7)
    x = ir.var("x", shape=(2, 96, 7, 7))
    w = ir.const((rng.standard_normal((64, 96, 3, 3)) * 0.1).astype("float32"))
    b = ir.const(rng.standard_normal(64).astype("float32"))
    fn = ir.Function([x], op.relu(op.bias_add(op.conv2d(x, w, padding=(1,)), b, axis=1)))
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"conv": 1} and '"tile"' in exe.get_source()
    value = rng.standard_normal((2, 96, 7, 7)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))
