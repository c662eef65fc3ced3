"""The int8 convolutions (codegen/lower/kernels/conv/int8.py): qnn_conv2d compiled as words of four u8
inputs times four s8 weights summed in int32 (vpdpbusd), and depthwise ones as byte
products summed in float32, give the interpreter's integers exactly (integer sums have
no rounding to forgive), alone and with the requantize that FuseOps puts in their
epilogue; so does the plain vector form used without VNNI."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.llvm import mathlib
from codegen.lower.kernels.conv import int8 as conv_int8
from egraph_ir.expr import op_name

from .....hosts import force_int8_kernels


@pytest.fixture(autouse=True, scope="module")
def _int8_kernels_on_any_cpu() -> Iterator[None]:
    """The int8 kernels are what these tests check, on any CPU (tests/hosts.py)."""
    with pytest.MonkeyPatch.context() as patch:
        force_int8_kernels(patch)
        yield


# (input channels, output channels, size, kernel, stride, padding, dilation, batch,

# groups): a first layer (3 channels: one word, partly filled), odd channels over two
# batch items, 1x1, stride 2 (output channels in the lanes: a 5x5 map), dilation 2,
# asymmetric padding, 32 output channels on a 7x7 map over two items (two vectors of
# them in the lanes), 1x1 whose register blocks are whole output rows (the epilogue per
# block) over two items; depthwise 3x3, 5x5 with stride 2 over two batch items, stride 2
# with asymmetric padding
SHAPES = [
    (3, 16, 12, 7, 2, (3, 3, 3, 3), 1, 1, 1),
    (5, 8, 9, 3, 1, (1, 1, 1, 1), 1, 2, 1),
    (16, 24, 7, 1, 1, (0, 0, 0, 0), 1, 1, 1),
    (8, 16, 10, 3, 2, (1, 1, 1, 1), 1, 1, 1),
    (4, 8, 11, 3, 1, (2, 2, 2, 2), 2, 1, 1),
    (12, 8, 8, 3, 1, (0, 1, 2, 1), 1, 1, 1),
    (20, 32, 7, 3, 1, (1, 1, 1, 1), 1, 2, 1),
    (8, 16, 8, 1, 1, (0, 0, 0, 0), 1, 2, 1),
    # depthwise: planes of 15 x 15 and more (smaller ones take the float path, worth_it)
    (16, 16, 16, 3, 1, (1, 1, 1, 1), 1, 1, 16),
    (8, 8, 31, 5, 2, (2, 2, 2, 2), 1, 2, 8),
    (12, 12, 31, 3, 2, (0, 1, 1, 0), 1, 1, 12),
]


def _model(shape: tuple[Any, ...], act: str, x_zero: int, seed: int, form: str) -> ir.IRModule:
    """qnn_conv2d of random int8 weights; `form` "sums" returns the int32 sums,
    "requantized" bias + requantize to `act`, as FakeQuantizationToInteger writes it."""
    c, o, size, k, stride, padding, dilation, n, groups = shape
    rng = np.random.default_rng(seed)
    x = ir.var("x", shape=(n, c, size, size), dtype=act)
    w = ir.const(rng.integers(-128, 128, (o, c // groups, k, k)).astype(np.int8))
    zx, zw = ir.const(np.array(x_zero, act)), ir.const(np.array(0, np.int8))
    acc = ir.op.qnn_conv2d(
        x, w, zx, zw, strides=[stride] * 2, padding=list(padding), dilation=[dilation] * 2,
        groups=groups,
    )  # fmt: skip
    if form == "requantized":
        bias = ir.const(rng.integers(-5000, 5000, o).astype(np.int32))
        multiplier = ir.const(np.array(rng.uniform(1e-4, 1e-2), np.float32))
        zy = ir.const(np.array(rng.integers(0, 256) + (-128 if act == "int8" else 0), act))
        acc = ir.op.requantize(ir.op.bias_add(acc, bias, axis=1), multiplier, zy)
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], acc)))


def _input(mod: ir.IRModule, seed: int) -> np.ndarray:
    t = mod["main"].params[0].checked_type
    low, high = (0, 256) if t.dtype == "uint8" else (-128, 128)
    return np.random.default_rng(seed + 1).integers(low, high, t.shape).astype(t.dtype)


def _int8_kernels(exe: Any) -> int:
    return sum(getattr(k, "variant", "").startswith("int8") for k in exe.graph.kernels())


@given(
    shape=st.sampled_from(SHAPES),
    act=st.sampled_from(["uint8", "int8"]),
    zero=st.integers(0, 255),
    form=st.sampled_from(["sums", "requantized"]),
    seed=st.integers(0, 2**16),
)
@example(shape=SHAPES[6], act="uint8", zero=3, form="requantized", seed=1)  # channels in lanes
@example(shape=SHAPES[7], act="int8", zero=200, form="requantized", seed=2)  # epilogue per block
@example(shape=SHAPES[8], act="uint8", zero=0, form="sums", seed=3)  # depthwise
@settings(max_examples=5, deadline=None)  # and the explicit examples: each form once
def test_int8_convolutions_equal_the_reference(shape, act, zero, form, seed) -> None:
    x_zero = zero - 128 if act == "int8" else zero
    mod = _model(shape, act, x_zero, seed, form)
    exe = codegen.build(mod)
    assert _int8_kernels(exe) == 1  # the requantize fused into it: one kernel in all
    assert len(exe.graph.kernels()) == 1
    x = _input(mod, seed)
    np.testing.assert_array_equal(exe.run(x=x), ir.interpret(mod, x))


def test_without_vnni_the_same_sums_come_from_plain_vectors(monkeypatch) -> None:
    """Where the CPU lacks VNNI the emitter writes the byte products out (widened,
    multiplied, four lane shuffles added): the same integers."""
    monkeypatch.setattr(mathlib, "host_has_vnni", lambda: False)
    for shape in SHAPES[:2]:
        mod = _model(shape, "uint8", 131, 7, "sums")
        exe = codegen.build(mod)
        assert _int8_kernels(exe) == 1
        x = _input(mod, 7)
        np.testing.assert_array_equal(exe.run(x=x), ir.interpret(mod, x))


def _typed_call(x: ir.Var, w: np.ndarray, w_zero: int, groups: int) -> Any:
    zx, zw = ir.const(np.array(3, np.uint8)), ir.const(np.array(w_zero, np.int8))
    call = ir.op.qnn_conv2d(x, ir.const(w), zx, zw, padding=[1] * 4, groups=groups)
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], call)))["main"].body


def test_calls_outside_the_kernels_keep_the_float_path() -> None:
    """A weight zero point other than 0 (its offset would need window sums), a grouped
    convolution that is not depthwise, and the config key turned off: CanonicalizeQnn
    lowers them to float convolutions, which still give the exact integers."""
    x = ir.var("x", shape=(1, 8, 6, 6), dtype="uint8")
    w = np.ones((8, 8, 3, 3), np.int8)
    assert conv_int8.fits(_typed_call(x, w, 0, 1))
    assert conv_int8.depthwise_fits(_typed_call(x, w[:, :1], 0, 8))
    for call in (_typed_call(x, w, 2, 1), _typed_call(x, w[:, :4], 0, 2)):
        assert not conv_int8.fits(call) and not conv_int8.depthwise_fits(call)
    mod = _model(SHAPES[1], "uint8", 3, 11, "requantized")
    value = _input(mod, 11)
    with pm.PassContext(config={"qnn.integer_kernels": False}):
        exe = codegen.build(mod)
    assert _int8_kernels(exe) == 0
    np.testing.assert_array_equal(exe.run(x=value), ir.interpret(mod, value))


def test_small_depthwise_planes_take_the_float_path() -> None:
    """Below 15 x 15 output pixels a depthwise call is not worth the byte kernel (its rows
    of pixels waste most lanes; the float path's blocked kernel is faster): lowered, exact."""
    mod = _model((12, 12, 13, 3, 1, (1, 1, 1, 1), 1, 1, 12), "uint8", 5, 4, "requantized")
    conv = next(e for e in ir.post_order(mod["main"].body) if op_name(e) == "qnn_conv2d")
    assert conv_int8.depthwise_fits(conv) and not conv_int8.worth_it(conv)
    exe = codegen.build(mod)
    assert _int8_kernels(exe) == 0
    value = _input(mod, 4)
    np.testing.assert_array_equal(exe.run(x=value), ir.interpret(mod, value))


def test_weights_pack_into_words_of_four_channels() -> None:
    """Word (o, c4, tap) holds input channels 4*c4 .. 4*c4 + 3 of output channel o at that
    tap, little end first, zeros past the last channel; the offset is zx * sum(w)."""
    mod = _model(SHAPES[1], "uint8", 9, 3, "sums")
    call = mod["main"].body
    words, offsets = conv_int8.packed_weights(call)
    w = call.args[1].data
    assert words.shape == (8, 2, 9) and words.dtype == np.int32
    as_bytes = words.view(np.int8).reshape(8, 2, 9, 4)
    np.testing.assert_array_equal(
        as_bytes[:, 0, :, :].transpose(0, 2, 1), w[:, :4].reshape(8, 4, 9)
    )
    np.testing.assert_array_equal(as_bytes[:, 1, :, 0], w[:, 4].reshape(8, 9))
    assert not as_bytes[:, 1, :, 1:].any()
    np.testing.assert_array_equal(offsets, 9 * w.astype(np.int64).reshape(8, -1).sum(axis=1))


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_a_quantised_layer_runs_as_one_int8_kernel_through_the_pipeline(act) -> None:
    """From dequantize -> conv2d -> quantize (what ONNX QDQ files hold) to one compiled
    kernel: FakeQuantizationToInteger, CanonicalizeQnn keeping the call, FuseOps putting
    the requantize in its epilogue."""
    rng = np.random.default_rng(2)
    x = ir.var("x", shape=(1, 8, 14, 14), dtype=act)
    zero = 5 if act == "uint8" else -7
    s = ir.const(np.array(0.05, np.float32))
    w = ir.const(rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8))
    deq = ir.op.dequantize(x, s, ir.const(np.array(zero, act)))
    wdq = ir.op.dequantize(w, ir.const(np.array(0.01, np.float32)), ir.const(np.array(0, np.int8)))
    y = ir.op.quantize(ir.op.conv2d(deq, wdq, padding=[1] * 4), s, ir.const(np.array(zero, act)))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], y)))
    exe = codegen.build(mod)
    assert _int8_kernels(exe) == 1 and len(exe.graph.kernels()) == 1
    value = _input(mod, 4)
    got = exe.run(x=value)
    with pm.PassContext() as ctx:
        integer = pm.passes.FakeQuantizationToInteger()(mod)
        pm.passes.CanonicalizeQnn()(integer)
    [report] = ctx.run.reports("CanonicalizeQnn")
    # qnn_conv2d and its requantize kept: the integer epilogue (codegen/lower/compute/qnn.py)
    assert (report.kept, report.lowered) == (2, 0)
    np.testing.assert_array_equal(got, ir.interpret(integer, value))
    # the float chain differs from the integer one by at most one quantum
    assert np.abs(got.astype(np.int32) - ir.interpret(mod, value).astype(np.int32)).max() <= 1


def test_an_int8_executable_saves_and_loads(tmp_path) -> None:
    """The artifact keeps the packed weights and the native code (with vpdpbusd: the
    CPU features it records include VNNI); loaded in place of a compile, it gives the
    same integers."""
    mod = _model(SHAPES[6], "uint8", 17, 5, "requantized")
    exe = codegen.build(mod)
    exe.save(tmp_path / "int8.egc")
    x = _input(mod, 5)
    np.testing.assert_array_equal(codegen.load(tmp_path / "int8.egc").run(x=x), exe.run(x=x))


def _pack_function_text(exe: Any) -> str:
    """The LLVM text of an executable's input-packing function (int8.pack_kernel)."""
    text = exe.get_source()
    start = re.search(r'define void @"\w+_pack"\(', text)
    assert start is not None
    return text[start.start() : text.index("\n}\n", start.start())]


def test_a_patch_convolution_packs_every_phase_in_one_loop() -> None:
    """A ViT's patch embedding (kernel = stride, no padding): the 8 x 8 = 64 phases of the
    stride grid read the same rows and columns, so one nest loops over them; a copy per
    phase made a function LLVM took a minute over at 16 x 16. Same values either way."""
    patches = _model((3, 16, 32, 8, 8, (0, 0, 0, 0), 1, 1, 1), "uint8", 5, 0, "requantized")
    exe = codegen.build(patches)
    x = _input(patches, 0)
    np.testing.assert_array_equal(exe.run(x=x), ir.interpret(patches, x))
    one_phase = _model((3, 16, 32, 8, 1, (0, 0, 0, 0), 1, 1, 1), "uint8", 5, 0, "requantized")
    size, single = (len(_pack_function_text(codegen.build(m))) for m in (patches, one_phase))
    assert size < 3 * single, (size, single)
