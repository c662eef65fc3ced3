"""BlockLayout (passmgr/passes/block_layout.py): blocked layouts chosen over the whole
function by the measured kernel costs, converting once at the ends of a blocked chain,
never where the conversions cost more than the kernels save; sound on random data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.llvm.mathlib import host_has_vnni
from egraph_ir import op
from egraph_ir.egraph import KernelCost
from egraph_ir.egraph.cost import Machine
from egraph_ir.testing import assert_allclose
from egraph_ir.visitor import post_order

REAL = Path(__file__).resolve().parents[4] / "shared" / "models" / "real"
FIXED = KernelCost(Machine(), measured=False)  # the defaults, not this machine's


def _calls(mod: ir.IRModule, name: str) -> int:
    return sum(
        1 for e in post_order(mod["main"].body) if isinstance(e, ir.Call) and e.op.name == name
    )


def inverted_residuals(blocks: int = 3, side: int = 28) -> ir.IRModule:
    """A MobileNetV2 stage: a 3-channel stem, then expand 1x1 -> depthwise 3x3 ->
    project 1x1 blocks with biases, ReLU6 and residual adds, then global pooling."""
    rng = np.random.default_rng(0)

    def const(*shape: int) -> ir.Expr:
        scale = 1.0 / np.sqrt(np.prod(shape[1:])) if len(shape) > 1 else 0.1
        return ir.const((rng.standard_normal(shape) * scale).astype("float32"))

    x = ir.var("x", shape=(1, 3, side, side))
    y = op.clip(op.bias_add(op.conv2d(x, const(32, 3, 3, 3), padding=(1,)), const(32)), 0.0, 6.0)
    for _ in range(blocks):
        e = op.clip(op.bias_add(op.conv2d(y, const(96, 32, 1, 1)), const(96)), 0.0, 6.0)
        d = op.conv2d(e, const(96, 1, 3, 3), padding=(1,), groups=96)
        d = op.clip(op.bias_add(d, const(96)), 0.0, 6.0)
        y = op.add(y, op.bias_add(op.conv2d(d, const(32, 96, 1, 1)), const(32)))
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.global_avg_pool2d(y))))


def _block(mod: ir.IRModule, **config: object) -> ir.IRModule:
    """BlockLayout with the default rates and time enough for the exact extraction on a
    busy machine (its 0.3 s may end on greedy-dag's answer there: blocked chains only
    pay together, which that misses)."""
    with pm.PassContext(opt_level=3, config=config):
        block = pm.passes.BlockLayout(cost_model=FIXED, extract_time_limit_s=5.0)  # type: ignore[arg-type]
        return block(mod)


def test_a_chain_of_blocked_convolutions_converts_once_at_each_end() -> None:
    mod = inverted_residuals()
    out = _block(mod)
    # every block's three convolutions, and the 3-channel stem reading NCHW into blocks
    assert _calls(out, "conv2d_nchwc") + _calls(out, "conv2d") == 10
    assert _calls(out, "conv2d_nchwc") >= 9
    assert _calls(out, "layout_transform") <= 2  # after the stem and before the pooling
    value = np.random.default_rng(1).standard_normal((1, 3, 28, 28)).astype("float32")
    assert_allclose(ir.interpret(out, value), ir.interpret(mod, value))


def test_the_blocked_program_builds_and_agrees_with_the_plain_one() -> None:
    mod = inverted_residuals(blocks=2, side=14)
    value = np.random.default_rng(2).standard_normal((1, 3, 14, 14)).astype("float32")
    with pm.PassContext(opt_level=3, config={"codegen.host_fallback": False}):
        exe = codegen.build(mod)
    assert_allclose(exe.run(x=value), ir.interpret(mod, value))


def test_the_profile_sets_the_cost_models_prediction_beside_each_measured_kernel() -> None:
    """What extraction believed each kernel costs, next to what it took (the numbers are
    this machine's: only their presence and the blocked kernels' shapes are checked)."""
    mod = inverted_residuals(blocks=1, side=14)
    with pm.PassContext(opt_level=3):
        exe = codegen.build(mod)
    value = np.random.default_rng(4).standard_normal((1, 3, 14, 14)).astype("float32")
    profile = exe.profile({"x": value}, repeats=2)
    blocked = [k for k in profile if k.label.startswith("conv/nchwc")]
    # the block's three convolutions, and the stem where the extraction blocked it too
    # (within its time limit the search may or may not reach that choice)
    assert len(blocked) >= 3 and all(k.predicted > 0 for k in blocked)
    assert sum(len(k.shape) == 5 for k in blocked) >= 2  # NCHW16c results (the last: NCHW)
    assert all(k.layout == ("NCHW16c" if len(k.shape) == 5 else "NCHW") for k in blocked)
    assert "predicted us" in str(profile)


def test_a_lone_convolution_stays_nchw_when_converting_costs_more() -> None:
    """One small depthwise convolution between NCHW-only ops: two conversions cost more
    than the blocked kernel saves on a 7x7 map."""
    rng = np.random.default_rng(3)
    x = ir.var("x", shape=(1, 16, 7, 7))
    w = ir.const(rng.standard_normal((16, 1, 3, 3)).astype("float32"))
    body = op.max_pool2d(op.conv2d(x, w, padding=(1,), groups=16), pool_size=(2, 2))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], body)))
    out = _block(mod)
    assert _calls(out, "conv2d_nchwc") == 0 and _calls(out, "layout_transform") == 0


def test_the_choice_can_be_switched_off() -> None:
    mod = inverted_residuals(blocks=1)
    assert ir.structural_equal(_block(mod, **{"layout.blocked": False}), mod)


def test_the_run_reports_the_rules_that_blocked_the_graph() -> None:
    with pm.PassContext(opt_level=3) as ctx:
        pm.passes.BlockLayout(cost_model=FIXED)(inverted_residuals(blocks=1))  # type: ignore[arg-type]
    report = ctx.run.last("BlockLayout")
    assert report.applied["conv2d-depthwise-blocked"] == 1
    assert report.applied["layout-round-trip"] >= 2
    assert report.cost_after < report.cost_before


@pytest.mark.skipif(not (REAL / "mobilenet_v2.onnx").exists(), reason="no ../shared models")
def test_mobilenet_v2_runs_blocked_and_agrees_with_its_recorded_output() -> None:
    from egraph_ir.frontend import from_onnx

    data = np.load(REAL / "mobilenet_v2.npz")
    with pm.PassContext(opt_level=3) as ctx:
        exe = codegen.build(from_onnx(REAL / "mobilenet_v2.onnx"))
    assert ctx.run.last("BlockLayout").applied["conv2d-depthwise-blocked"] == 17
    assert exe.kernel_kinds().get("host", 0) == 0
    out = exe.run(input=data["input"])
    np.testing.assert_allclose(out, data["expected"], rtol=1e-4, atol=1e-4)
    # each blocked kernel still names the ONNX nodes it computes, not all of them at once
    profile = exe.profile({"input": data["input"]}, repeats=1)
    blocked = [k for k in profile if k.label.startswith("conv/nchwc")]
    assert blocked and all(1 <= len(k.sources) <= 2 for k in blocked)


def test_a_patch_embedding_becomes_one_product_and_its_transposes_cancel() -> None:
    """A ViT's stem: 16x16 windows at stride 16, bias, flatten, transpose to tokens. The
    kernel-choice rule cuts the image into patches and multiplies them by the flattened
    weights; the transposes back to NCHW meet the model's own and cancel."""
    rng = np.random.default_rng(5)
    x = ir.var("x", shape=(1, 3, 224, 208))
    w = ir.const(rng.standard_normal((192, 3, 16, 16)).astype("float32") / 30)
    b = ir.const(rng.standard_normal(192).astype("float32"))
    conv = op.bias_add(op.conv2d(x, w, strides=(16, 16)), b)
    tokens = op.transpose(op.reshape(conv, newshape=(1, 192, -1)), axes=(0, 2, 1))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], tokens)))
    out = _block(mod)
    assert _calls(out, "conv2d") == 0 and _calls(out, "dense") == 1
    assert _calls(out, "transpose") == 1  # the patches' cut; none back to NCHW
    value = rng.standard_normal((1, 3, 224, 208)).astype("float32")
    expected = ir.interpret(mod, value)
    assert_allclose(ir.interpret(out, value), expected)
    with pm.PassContext(opt_level=3, config={"codegen.host_fallback": False}):
        exe = codegen.build(mod)
    assert_allclose(exe.run(x=value), expected)


def test_fire_modules_join_their_blocked_branches_without_converting() -> None:
    """Two of SqueezeNet's Fire modules (a 1x1 squeeze, then a 1x1 and a 3x3 expansion
    joined along the channels; builder-style paddings `(0,)` and `(1,)`, which the
    rules' `[0, 0, 0, 0]` match once encoded): the branches are blocked (the 3x3 by
    Winograd's rule), the join between the modules is the blocked concatenate, and the
    build agrees with the interpreter."""
    rng = np.random.default_rng(5)
    x = ir.var("x", shape=(1, 128, 28, 28))

    def conv(h: ir.Expr, o: int, c: int, k: int) -> ir.Expr:
        w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype("float32")
        b = rng.standard_normal(o).astype("float32")
        return op.relu(op.bias_add(op.conv2d(h, ir.const(w), padding=(k // 2,)), ir.const(b)))

    def fire(h: ir.Expr, c: int) -> ir.Expr:
        squeeze = conv(h, 32, c, 1)
        return op.concatenate([conv(squeeze, 128, 32, 1), conv(squeeze, 128, 32, 3)], axis=1)

    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], fire(fire(x, 128), 256))))
    out = _block(mod)
    joins = [
        e.checked_type.shape
        for e in post_order(out["main"].body)
        if isinstance(e, ir.Call) and e.op.name == "concatenate"
    ]
    assert (1, 16, 28, 28, 16) in joins
    assert _calls(out, "conv2d_winograd") == 2
    value = rng.standard_normal((1, 128, 28, 28)).astype("float32")
    with pm.PassContext(opt_level=3):
        exe = codegen.build(mod)
    assert_allclose(exe.run(x=value), ir.interpret(mod, x=value))


def test_without_a_convolution_extraction_is_greedy() -> None:
    """Nothing is blocked without a convolution and the other rules' choices are local:
    greedy-dag extracts (the exact solves only pay for chains of blocked convolutions, float
    or int8)."""
    x = ir.var("x", shape=(8, 64))
    body = op.relu(op.transpose(op.transpose(x, axes=(1, 0)), axes=(1, 0)))  # a layout rule
    plain = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], body)))
    extractors = []
    for mod in (plain, inverted_residuals(blocks=1), int8_inverted_residual()):
        with pm.PassContext(opt_level=3) as ctx:
            pm.passes.BlockLayout()(mod)
        extractors.append(ctx.run.last("BlockLayout").extractor)
    assert extractors[0] == "greedy" and "greedy" not in extractors[1:], extractors


def int8_inverted_residual(side: int = 14) -> ir.IRModule:
    """A uint8 inverted residual as FakeQuantizationToInteger leaves it: expand 1x1 (and
    an EfficientNet's SiLU, a table) -> depthwise 3x3 -> project 1x1 (24 channels: no
    whole blocks), each qnn_conv2d with an int32 bias and a requantize to uint8 (the
    depthwise one per channel)."""
    rng = np.random.default_rng(0)

    def layer(
        x: ir.Expr, shape: tuple[int, ...], zeros: tuple[int, int], scale, **attrs
    ) -> ir.Expr:
        w = ir.const(rng.integers(-128, 128, shape).astype("int8"))
        zx = ir.const(np.array(zeros[0], "uint8"))
        acc = op.qnn_conv2d(x, w, zx, ir.const(np.array(0, "int8")), **attrs)
        acc = op.bias_add(acc, ir.const(rng.integers(-999, 999, shape[0]).astype("int32")))
        return op.requantize(acc, ir.const(scale), ir.const(np.array(zeros[1], "uint8")))

    x = ir.var("x", shape=(1, 24, side, side), dtype="uint8")
    y = layer(x, (96, 24, 1, 1), (5, 0), np.array(2e-3, "float32"))
    silu = ir.const(rng.integers(0, 256, 256).astype("uint8"))  # a quantised SiLU's table
    y = op.take(silu, y, axis=0, mode="fast")
    per_channel = rng.uniform(1e-4, 1e-3, (96, 1, 1)).astype("float32")
    y = layer(y, (96, 1, 3, 3), (0, 0), per_channel, padding=(1,), groups=96)
    y = layer(y, (24, 96, 1, 1), (0, 128), np.array(5e-4, "float32"))
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], y)))


@pytest.mark.parametrize("vnni", [True, False])
def test_an_int8_chain_runs_blocked_bytes_where_the_host_has_vnni(
    vnni: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With VNNI the three int8 convolutions go blocked (the expansion from NCHW, the
    projection back to it: no conversion left), without it none does (no blocked int8
    kernel there); either way the outputs are the plain program's, bit for bit."""
    from egraph_ir.egraph import kernel_cost

    monkeypatch.setattr(kernel_cost, "host_has_vnni", lambda: vnni)
    mod = int8_inverted_residual()
    with pm.PassContext(opt_level=3):
        block = pm.passes.BlockLayout(
            cost_model=KernelCost(Machine(), measured=False), extract_time_limit_s=5.0
        )  # type: ignore[arg-type]
        out = block(mod)
    assert _calls(out, "qnn_conv2d_nchwc") == (3 if vnni else 0)
    assert _calls(out, "layout_transform") == 0
    value = np.random.default_rng(1).integers(0, 256, (1, 24, 14, 14)).astype("uint8")
    np.testing.assert_array_equal(ir.interpret(out, value), ir.interpret(mod, value))


@pytest.mark.skipif(not host_has_vnni(), reason="the blocked int8 kernels need VNNI")
def test_the_int8_chain_builds_into_the_blocked_byte_kernels() -> None:
    mod = int8_inverted_residual(side=20)
    value = np.random.default_rng(2).integers(0, 256, (1, 24, 20, 20)).astype("uint8")
    with pm.PassContext(opt_level=3, config={"codegen.host_fallback": False}):
        exe = codegen.build(mod)
    np.testing.assert_array_equal(exe.run(x=value), ir.interpret(mod, value))
    labels = {k.label for k in exe.profile({"x": value}, repeats=1)}
    assert {"conv/int8-nchwc-pointwise", "conv/int8-nchwc-depthwise"} <= labels
