"""conv2d_winograd (codegen/lower/kernels/conv/winograd.py): Winograd's F(2x2, 3x3) and F(4x4, 3x3) on
blocked data equal the interpreter's direct convolution, fused epilogues included,
natively, on odd maps too; the weight transform is G g G^T; the matrices correlate.

Tolerance: the default float32 one (egraph_ir.compare: 1e-4 relative, 1e-5 absolute).
The transforms combine inputs before the products and products after (coefficients up to
5 and 8 for 4x4 tiles), so each output carries a few more roundings than a direct sum;
with weights scaled as a trained layer's (outputs O(1)) the differences measured 2e-7 to
5e-6 for 2x2 tiles (64 to 256 channels), inside it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.lower.kernels.conv import winograd as conv_winograd
from codegen.lower.kernels.conv.winograd import BlockedWinograd
from codegen.lower.kernels.conv.winograd_matrices import minimal
from codegen.lower.select import CHOOSERS
from egraph_ir import op
from egraph_ir.testing import assert_allclose

NATIVE = {"codegen.host_fallback": False}


@st.composite
def winograd_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    """Channels in blocks, any padding, odd maps too (their last tiles half outside), an
    epilogue or none."""
    c, o = 16 * draw(st.integers(1, 3)), 16 * draw(st.sampled_from([1, 2, 4, 6]))
    top, left, bottom, right = draw(st.sampled_from([(1, 1, 1, 1), (0, 0, 0, 0), (2, 1, 0, 1)]))
    n = draw(st.integers(1, 2))
    h = draw(st.integers(3 - top - bottom, 13))
    w = draw(st.integers(3 - left - right, 13))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = ir.var("x", shape=(n, c // 16, h, w, 16))
    weights = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype("float32")
    params, inputs = [x], {"x": rng.standard_normal((n, c // 16, h, w, 16)).astype("float32")}
    tile = draw(st.sampled_from([2, 4]))
    body = op.conv2d_winograd(
        x, ir.const(weights), padding=(top, left, bottom, right), tile_size=tile
    )
    kind = draw(st.sampled_from(["none", "bias_relu", "residual"]))
    if kind == "bias_relu":
        bias = ir.const(rng.standard_normal((1, o // 16, 1, 1, 16)).astype("float32"))
        body = op.relu(op.add(body, bias))
    elif kind == "residual":
        shape = ir.infer_type(ir.Function(list(params), body)).body.checked_type.shape
        skip = ir.var("skip", shape=shape)
        params.append(skip)
        inputs["skip"] = rng.standard_normal(shape).astype("float32")
        body = op.relu(op.add(body, skip))
    return ir.Function(params, body), inputs


@given(winograd_cases())
def test_every_winograd_form_matches_the_interpreter(case) -> None:
    fn, inputs = case
    with pm.PassContext(config=NATIVE):
        exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"conv": 1}
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))


def test_a_resnet_sized_layer_is_winograd_and_close_to_the_direct_convolution() -> None:
    """64 channels at 56x56 (ResNet-18's first stage), bias and ReLU fused."""
    rng = np.random.default_rng(0)
    x = ir.var("x", shape=(1, 4, 56, 56, 16))
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype("float32")
    bias = ir.const(rng.standard_normal((1, 4, 1, 1, 16)).astype("float32"))
    fn = ir.Function([x], op.relu(op.add(op.conv2d_winograd(x, ir.const(w)), bias)))
    with pm.PassContext(config=NATIVE):
        exe = codegen.build(fn)
    value = rng.standard_normal((1, 4, 56, 56, 16)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))
    assert {k.label for k in exe.profile({"x": value}, repeats=1)} == {"conv/nchwc-winograd-2x2"}


def test_wide_layers_take_row_groups_and_odd_maps_store_only_the_map() -> None:
    """512 channels at 7x7 (ResNet-18's last stage): its 16 MB of transformed weights do
    not stay in cache, so one work item takes all four rows of tiles of its panels (the
    weights stream once); the map's odd edge is computed in half-outside tiles."""
    rng = np.random.default_rng(5)
    x = ir.var("x", shape=(1, 32, 7, 7, 16))
    w = (rng.standard_normal((512, 512, 3, 3)) / 68).astype("float32")
    fn = ir.Function([x], op.relu(op.conv2d_winograd(x, ir.const(w))))
    call = ir.infer_type(fn).body.args[0]
    strategy = CHOOSERS["conv2d_winograd"](call)
    assert isinstance(strategy, BlockedWinograd) and strategy.layout.rows == 4
    with pm.PassContext(config=NATIVE):
        exe = codegen.build(fn)
    value = rng.standard_normal((1, 32, 7, 7, 16)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


@pytest.mark.parametrize("tile", [2, 4])
def test_the_weight_transform_is_g_times_g_times_g_transposed(tile: int) -> None:
    rng = np.random.default_rng(2)
    g = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    x = ir.var("x", shape=(1, 1, 8, 8, 16))
    conv = op.conv2d_winograd(x, ir.const(g), tile_size=tile)
    call = ir.infer_type(ir.Function([x], conv)).body
    layout = CHOOSERS["conv2d_winograd"](call)
    assert isinstance(layout, BlockedWinograd)
    width = layout.layout.width
    u = conv_winograd.transformed_weights(call, width)  # (n^2, O / width, C, width)
    o, c, m = 21, 5, minimal(tile)
    want = m.g @ g[o, c].astype(np.float64) @ m.g.T
    got = u[:, o // width, c, o % width].reshape(m.n, m.n)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("tile", [2, 4])
def test_the_matrices_compute_a_one_dimensional_correlation(tile: int) -> None:
    """A^T [(G g) . (B^T d)] = the m outputs of the 3-tap correlation of d with g."""
    rng = np.random.default_rng(tile)
    m = minimal(tile)
    d, g = rng.standard_normal(m.n), rng.standard_normal(3)
    want = [d[i : i + 3] @ g for i in range(tile)]
    np.testing.assert_allclose(m.at @ ((m.g @ g) * (m.bt @ d)), want, rtol=1e-12)


def test_a_residual_block_at_opt_level_3_takes_winograd_and_matches() -> None:
    """A ResNet basic block (two 3x3 convolutions of 64 channels with bias, ReLU and the
    skip connection, batch 2, a 30x22 map): BlockLayout's extraction picks Winograd
    kernels, the conversions cancel inside the block, and the result is the NCHW one."""
    rng = np.random.default_rng(7)
    x = ir.var("x", shape=(2, 64, 30, 22))

    def conv_bias(h: ir.Expr) -> ir.Expr:
        w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype("float32")
        b = rng.standard_normal(64).astype("float32")
        return op.bias_add(op.conv2d(h, ir.const(w), padding=(1, 1)), ir.const(b))

    fn = ir.Function([x], op.relu(op.add(conv_bias(op.relu(conv_bias(x))), x)))
    with pm.PassContext(opt_level=3):
        exe = codegen.build(fn)
    value = rng.standard_normal((2, 64, 30, 22)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))
    labels = [k.label for k in exe.profile({"x": value}, repeats=1)]
    assert sum(label.startswith("conv/nchwc-winograd") for label in labels) == 2
