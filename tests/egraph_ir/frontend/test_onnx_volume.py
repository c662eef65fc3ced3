"""3-D Conv, ConvTranspose, MaxPool, AveragePool and LpPool (egraph_ir/frontend/onnx/volume.py) against
onnxruntime, interpreted and compiled: random sizes, strides, dilations, padding, groups,
ceil mode and pad counting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from egraph_ir.frontend import from_onnx
from egraph_ir.testing import assert_allclose

from ..onnx_single_op import run_model, single_op_model


@st.composite
def windows(draw: st.DrawFn, pooling: bool) -> dict:
    kernel = [draw(st.integers(1, 3)) for _ in range(3)]
    dilation = [draw(st.integers(1, 2)) for _ in range(3)]
    # pooling: no window wholly in padding (ORT's max is then -FLT_MAX, ours -inf)
    pads = [draw(st.integers(0, (k - 1) // 2)) for k in kernel] * 2
    if not pooling:
        pads = [draw(st.integers(0, 2)) for _ in range(6)]
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True)]
    padded = [pads[a] + pads[a + 3] for a in range(3)]
    size = [draw(st.integers(max(r - p, 1), r + 5)) for r, p in zip(reach, padded, strict=True)]
    return {
        "size": size,
        "kernel_shape": kernel,
        "strides": [draw(st.integers(1, 2)) for _ in range(3)],
        "dilations": dilation,
        "pads": pads,
    }


def _check(model, feeds) -> None:
    """float32 tolerance (egraph_ir.testing): sums of at most 324 products of N(0, 1)
    values, added in another order than onnxruntime's."""
    expected = run_model(model, feeds)[0]
    mod = from_onnx(model)
    assert_allclose(np.asarray(ir.interpret(mod, **feeds)), expected, what="interpreted")
    assert_allclose(codegen.build(mod).run(**feeds), expected, what="compiled")


@settings(deadline=None, max_examples=15)
@given(windows(pooling=False), st.sampled_from([1, 2]), st.booleans(), st.integers(0, 2**16))
def test_conv3d_matches_onnxruntime(win: dict, groups: int, bias: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = win.pop("size")
    x = rng.standard_normal((2, 2 * groups, *size)).astype("float32")
    w = rng.standard_normal((2 * groups, 2, *win["kernel_shape"])).astype("float32")
    inputs = [x, w, rng.standard_normal(2 * groups).astype("float32") if bias else None]
    model, feeds = single_op_model("Conv", inputs, {**win, "group": groups}, initializers={})
    _check(model, feeds)


@settings(deadline=None, max_examples=15)
@given(
    st.lists(st.integers(1, 3), min_size=3, max_size=3),  # kernel
    st.lists(st.integers(1, 2), min_size=3, max_size=3),  # strides
    st.lists(st.integers(1, 2), min_size=3, max_size=3),  # dilations
    st.lists(st.integers(0, 1), min_size=6, max_size=6),  # pads
    st.sampled_from([1, 2]),
    st.integers(0, 2**16),
)
def test_conv_transpose3d_matches_onnxruntime(kernel, strides, dilations, pads, groups, seed):
    """ConvTranspose on NCDHW (3-D U-Net decoders): spread, flipped, one 3-D convolution."""
    rng = np.random.default_rng(seed)
    extra = [int(rng.integers(0, s)) for s in strides]  # output_padding < stride (ORT)
    x = rng.standard_normal((1, 2 * groups, 3, 4, 3)).astype("float32")
    w = rng.standard_normal((2 * groups, 2, *kernel)).astype("float32")
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": pads,
             "output_padding": extra, "group": groups}  # fmt: skip
    model, feeds = single_op_model("ConvTranspose", [x, w], attrs)
    _check(model, feeds)


@settings(deadline=None, max_examples=15)
@given(
    windows(pooling=True),
    st.sampled_from(["MaxPool", "AveragePool", "LpPool"]),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_pool3d_matches_onnxruntime(win, op_type, ceil_mode, include_pad, seed) -> None:
    rng = np.random.default_rng(seed)
    size = win.pop("size")
    x = rng.standard_normal((1, 3, *size)).astype("float32")
    attrs = {**win, "ceil_mode": int(ceil_mode)}
    if op_type == "AveragePool":
        attrs["count_include_pad"] = int(include_pad)
    if op_type == "LpPool":
        attrs["p"] = 3 if include_pad else 2
    model, feeds = single_op_model(op_type, [x], attrs)
    _check(model, feeds)


def test_a_small_video_network_compiles_and_matches_onnxruntime() -> None:
    """Conv3d + bias + ReLU, MaxPool3d with stride 2, a strided grouped Conv3d and an
    AvgPool3d, as a torchvision video model's stem and first stage would export them."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)

    def const(name: str, *shape: int) -> object:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 7, 7],
                         strides=[1, 2, 2], pads=[1, 3, 3, 1, 3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[1, 3, 3], strides=[1, 2, 2],
                         pads=[0, 1, 1, 0, 1, 1]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], kernel_shape=[3, 3, 3],
                         strides=[2, 1, 1], pads=[1, 1, 1, 1, 1, 1], group=4),
        helper.make_node("AveragePool", ["c2"], ["y"], kernel_shape=[2, 2, 2],
                         strides=[2, 2, 2]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "video",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [const("w1", 16, 3, 3, 7, 7), const("b1", 16), const("w2", 16, 4, 3, 3, 3)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((1, 3, 8, 32, 32)).astype("float32")}
    _check(model, feeds)


def test_other_ranks_are_named_in_the_error() -> None:
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2, 2])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ir.CompilerError, match="3-D"):
        from_onnx(model)


@pytest.mark.parametrize("shape", [(1, 2, 7), (1, 2, 5, 7), (1, 2, 3, 5, 7)])
def test_lp_pool_with_ceil_mode_sums_only_what_each_window_covers(shape) -> None:
    """The last window of ceil mode reaches past the input: its sum has fewer terms than
    the kernel's size (it used to be scaled up to the full window, in 1-D and 2-D too)."""
    spatial = len(shape) - 2
    attrs = {"kernel_shape": [2] * spatial, "strides": [2] * spatial, "ceil_mode": 1, "p": 2}
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype("float32")
    model, feeds = single_op_model("LpPool", [x], attrs)
    _check(model, feeds)
