"""Every conv2d and pooling form compiled natively agrees with the interpreter: groups,
depthwise, strides, dilation, each padding form, batches, dtypes (hypothesis over shapes and
attributes); none of them runs through the reference at run time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.testing import assert_allclose

PADDINGS = st.one_of(
    st.tuples(st.integers(0, 2)),
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    st.tuples(*[st.integers(0, 2)] * 4),
)


@st.composite
def conv_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    groups = draw(st.sampled_from([1, 1, 2, 3, "depthwise"]))
    per_group = draw(st.integers(1, 3))
    c = per_group * (groups if isinstance(groups, int) else 1)
    if groups == "depthwise":
        c = draw(st.integers(1, 6))
        groups, per_group = c, 1
    o = groups * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = draw(st.sampled_from([(1,), (1, 1), (2, 2), (1, 2), (2,)]))
    dilation = draw(st.sampled_from([(1, 1), (2, 2), (1, 2)]))
    padding = draw(PADDINGS)
    n = draw(st.integers(1, 2))
    h = draw(st.integers(kh * dilation[0], 9))
    w = draw(st.sampled_from([kw * dilation[-1], 7, 16, 17, 32]))
    w = max(w, kw * dilation[-1])
    dtype = draw(st.sampled_from(["float32", "float32", "float64"]))
    weight_is_param = draw(st.booleans())
    x = ir.var("x", shape=(n, c, h, w), dtype=dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    weights = rng.standard_normal((o, per_group, kh, kw)).astype(dtype)
    wv = ir.var("w", shape=weights.shape, dtype=dtype)
    body = op.conv2d(
        x,
        wv if weight_is_param else ir.const(weights),
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
    )
    if draw(st.booleans()):  # a fused epilogue: bias and relu
        bias = ir.const(rng.standard_normal((1, o, 1, 1)).astype(dtype))
        body = op.relu(op.add(body, bias))
    params = [x, wv] if weight_is_param else [x]
    inputs = {"x": rng.standard_normal((n, c, h, w)).astype(dtype)}
    if weight_is_param:
        inputs["w"] = weights
    return ir.Function(params, body), inputs


@given(conv_cases())
def test_every_conv2d_form_matches_the_interpreter(case) -> None:
    fn, inputs = case
    exe = codegen.build(fn)
    assert "host" not in exe.kernel_kinds()
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))


@st.composite
def pool_cases(draw: st.DrawFn) -> tuple[ir.Function, dict[str, np.ndarray]]:
    kind = draw(st.sampled_from(["max_pool2d", "avg_pool2d"]))
    # max pooling takes 8-bit integers too (quantised models): padding is the least value
    dtype = (
        draw(st.sampled_from(["float32", "uint8", "int8"])) if kind == "max_pool2d" else "float32"
    )
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pool_size = (kh,) if kh == kw and draw(st.booleans()) else (kh, kw)
    limit = min(kh, kw) - 1  # padding must be smaller than the window
    padding = draw(
        st.one_of(
            st.tuples(st.integers(0, limit)),
            st.tuples(st.integers(0, kh - 1), st.integers(0, kw - 1)),
        )
    )
    strides = draw(st.sampled_from([(1,), (2, 2), (1, 2)]))
    attrs = {"pool_size": pool_size, "padding": padding, "strides": strides}
    attrs["ceil_mode"] = draw(st.booleans())
    if kind == "avg_pool2d":
        attrs["count_include_pad"] = draw(st.booleans())
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), 7, draw(st.integers(kw, 9)))
    x = ir.var("x", shape=shape, dtype=dtype)
    fn = ir.Function([x], op.call(kind, x, **attrs))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if dtype == "float32":
        return fn, {"x": rng.standard_normal(shape).astype("float32")}
    info = np.iinfo(dtype)
    return fn, {"x": rng.integers(info.min, info.max + 1, shape).astype(dtype)}


@given(pool_cases())
def test_every_pooling_form_matches_the_interpreter(case) -> None:
    fn, inputs = case
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"loops": 1}
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs), what=str(fn))


@pytest.mark.parametrize("padding", [(1,), (1, 2), (1, 0, 2, 1)])
def test_short_padding_forms_compile(padding: tuple[int, ...]) -> None:
    x = ir.var("x", shape=(1, 1, 4, 4))
    rng = np.random.default_rng(0)
    for body in (
        op.conv2d(
            x, ir.const(rng.standard_normal((1, 1, 2, 2)).astype("float32")), padding=padding
        ),
        op.max_pool2d(x, pool_size=(3, 3), padding=padding),
    ):
        fn = ir.Function([x], body)
        value = rng.standard_normal((1, 1, 4, 4)).astype("float32")
        assert_allclose(codegen.build(fn).run(x=value), ir.interpret(fn, x=value))


def test_depthwise_conv_is_a_jit_kernel_with_its_epilogue() -> None:
    x = ir.var("x", shape=(1, 32, 28, 28))
    rng = np.random.default_rng(1)
    w = ir.const(rng.standard_normal((32, 1, 3, 3)).astype("float32"))
    fn = ir.Function([x], op.clip(op.conv2d(x, w, padding=(1,), groups=32), 0.0, 6.0))
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"conv": 1}
    value = rng.standard_normal((1, 32, 28, 28)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))
    assert "_conv" in exe.get_source()


@pytest.mark.parametrize(
    "side, kernel, padding, avx512, avx2",
    [  # (OB, XV): 16 accumulators with AVX-512's 32 registers, 6 with AVX2's 16, where
        # a tap's XV input vectors are live too: (OB + 1) x XV <= 6 (2 x 3 spilled)
        (56, 3, 1, (8, 2), (2, 2)),  # 56 x 58 = 203 vectors: no whole split, widest anyway
        (28, 1, 0, (8, 1), (2, 1)),  # a 1x1 keeps the exact split (784 = 49 vectors)
    ],
)
def test_register_blocks_are_widest_unless_a_pointwise_row_splits(
    side: int, kernel: int, padding: int, avx512: tuple[int, int], avx2: tuple[int, int]
) -> None:
    from codegen.llvm.cpu import accumulator_budget
    from codegen.lower.kernels.conv.shape import Wide

    blocks = avx512 if accumulator_budget() >= 16 else avx2

    x = ir.var("x", shape=(1, 64, side, side))
    w = ir.const(np.zeros((64, 64, kernel, kernel), "float32"))
    conv = ir.infer_type(ir.Function([x], op.conv2d(x, w, padding=(padding,)))).body
    lay = Wide.of(conv)
    assert (lay.ob, lay.xv) == blocks


@pytest.mark.parametrize("side", [7, 14])
def test_pointwise_convs_on_ragged_rows_use_the_direct_kernel(side: int) -> None:
    """MobileNetV2's late 1x1 convolutions (49 or 196 columns, not whole register blocks)
    run in the micro-kernel with wide rows, not as a GEMM with too few columns."""
    x = ir.var("x", shape=(2, 96, side, side))
    rng = np.random.default_rng(side)
    w = ir.const((rng.standard_normal((160, 96, 1, 1)) * 0.1).astype("float32"))
    b = ir.const(rng.standard_normal(160).astype("float32"))
    fn = ir.Function([x], op.clip(op.bias_add(op.conv2d(x, w), b, axis=1), 0.0, 6.0))
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"conv": 1} and not exe.program.uses_blas
    value = rng.standard_normal((2, 96, side, side)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


@pytest.mark.parametrize("stride, dilation", [(1, 1), (2, 1), (2, 2)])
def test_depthwise_blocks_pad_their_own_channel(stride: int, dilation: int) -> None:
    """A depthwise block pads (and phase-splits) the one channel it reads itself, into the
    calling thread's slot: no whole padded copy of the input (no `_pad` prologue). Batch
    3 and two threads, so slots are shared by batch items and taken by both threads."""
    x = ir.var("x", shape=(3, 24, 19, 19))
    rng = np.random.default_rng(stride + dilation)
    w = ir.const(rng.standard_normal((24, 1, 3, 3)).astype("float32"))
    b = ir.const(rng.standard_normal(24).astype("float32"))
    conv = op.conv2d(
        x, w, strides=(stride, stride), padding=(1,), dilation=(dilation, dilation), groups=24
    )
    fn = ir.Function([x], op.clip(op.bias_add(conv, b, axis=1), 0.0, 6.0))
    value = rng.standard_normal((3, 24, 19, 19)).astype("float32")
    for threads in (1, 2):
        with pm.PassContext(config={"codegen.num_threads": threads}):
            exe = codegen.build(fn)
        assert exe.kernel_kinds() == {"conv": 1} and "_pad" not in exe.get_source()
        assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


@pytest.mark.parametrize(("strides", "kernel"), [((2, 2), 3), ((1, 1), 5), ((2, 2), 1)])
def test_a_batch_splits_into_items_and_channel_blocks(strides, kernel) -> None:
    """At batch > 1 the direct kernel's work is (item, block of output channels) pairs, an
    item's blocks in turn (its input stays in cache): every item, each thread's slot of
    wide rows and the fused epilogue agree with the interpreter at 1, 2 and 3 threads."""
    rng = np.random.default_rng(kernel)
    x = ir.var("x", shape=(3, 8, 17, 15))
    w = ir.const(rng.standard_normal((24, 8, kernel, kernel)).astype("float32"))
    b = ir.const(rng.standard_normal(24).astype("float32"))
    conv = op.conv2d(x, w, strides=strides, padding=(kernel // 2,))
    fn = ir.Function([x], op.relu(op.bias_add(conv, b, axis=1)))
    value = rng.standard_normal((3, 8, 17, 15)).astype("float32")
    for threads in (1, 2, 3):
        with pm.PassContext(config={"codegen.num_threads": threads}):
            exe = codegen.build(fn)
        assert [k.variant for k in exe.graph.kernels()] == ["direct"]
        assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


def test_one_thread_and_many_give_the_same_results() -> None:
    x = ir.var("x", shape=(2, 16, 40, 40))
    rng = np.random.default_rng(2)
    w1 = ir.const(rng.standard_normal((16, 1, 3, 3)).astype("float32"))
    w2 = ir.const(rng.standard_normal((64, 16, 1, 1)).astype("float32"))
    w3 = ir.const(rng.standard_normal((32, 64, 3, 3)).astype("float32"))
    h = op.relu(op.conv2d(x, w1, padding=(1,), groups=16))
    h = op.relu(op.conv2d(h, w2))
    h = op.conv2d(h, w3, strides=(2, 2), padding=(1,))
    y = op.softmax(
        op.dense(
            op.reshape(h, newshape=(2, -1)),
            ir.const(rng.standard_normal((10, 32 * 20 * 20)).astype("float32")),
        ),
        axis=-1,
    )
    fn = ir.Function([x], y)
    value = rng.standard_normal((2, 16, 40, 40)).astype("float32")
    results = []
    for threads in (1, 2, 3):
        with pm.PassContext(config={"codegen.num_threads": threads}):
            exe = codegen.build(fn)
        assert exe.threads == threads
        results.append(exe.run(x=value))
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    assert_allclose(results[0], ir.interpret(fn, x=value))


@pytest.mark.parametrize(
    ("kernel", "strides", "dilation", "groups"),
    [((7, 7), (2, 2), (1, 1), 1), ((5, 5), (1, 1), (2, 2), 1), ((5, 3), (2, 1), (1, 2), 2)],
)
def test_large_kernels_keep_a_row_loop_and_agree(kernel, strides, dilation, groups) -> None:
    rng = np.random.default_rng(3)
    x = ir.var("x", shape=(2, 4, 23, 21))
    w = ir.const(rng.standard_normal((8, 4 // groups, *kernel)).astype("float32"))
    body = op.conv2d(x, w, strides=strides, padding=(3, 1, 2, 0), dilation=dilation, groups=groups)
    fn = ir.Function([x], op.relu(body))
    value = rng.standard_normal((2, 4, 23, 21)).astype("float32")
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"conv": 1}
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


@pytest.mark.parametrize(("size", "patch", "channels"), [(16, 4, 8), (64, 16, 8), (224, 16, 192)])
def test_patch_embeddings_run_direct_with_one_loop_over_their_phases(
    size: int, patch: int, channels: int
) -> None:
    """A convolution whose stride is its kernel and reaches no padding (a ViT's patch
    embedding) splits its input into stride x stride phases that are all whole planes:
    one loop copies them (the IR stays small: 256 phases used to mean 256 copy nests, a
    672k-character LLVM module), and the result is exact. ViT-tiny's (192 channels, 14x14
    patches): the register blocks read two rows past the input, which the copy zeroes."""
    rng = np.random.default_rng(patch)
    x = ir.var("x", shape=(1, 3, size, size))
    scale = 1 / np.sqrt(3 * patch * patch)
    w = ir.const((rng.standard_normal((channels, 3, patch, patch)) * scale).astype("float32"))
    fn = ir.Function([x], op.conv2d(x, w, strides=(patch, patch)))
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"conv": 1}
    assert [k.variant for k in exe.graph.kernels()] == ["direct"]
    assert len(exe.get_source()) < 300_000  # the per-phase copies alone were 672k for 256
    value = rng.standard_normal((1, 3, size, size)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))
