"""The staged back end: products through the executable's own BLAS (batched, broadcast,
transposed, split over threads), shared code for identical groups, and the stages."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.build import fuse, lower, optimise, unique_kernels
from codegen.plan.devices import DevicePlan
from codegen.plan.memory import plan_graph
from codegen.runtime import blas
from egraph_ir import models, op
from egraph_ir.testing import assert_allclose

BATCHES = st.sampled_from([(), (1,), (3,), (2, 1), (1, 2), (2, 3)])


@given(BATCHES, BATCHES, st.sampled_from([1, 40, 67]), st.sampled_from(["float32", "float64"]))
def test_broadcast_matmul_through_blas_matches_the_interpreter(a_batch, b_batch, m, dtype) -> None:
    k, n = 48, 40  # above the small-product size, so BLAS runs it
    try:
        np.broadcast_shapes(a_batch, b_batch)
    except ValueError:
        assume(False)
    a = ir.var("a", shape=(*a_batch, m, k), dtype=dtype)
    b = ir.var("b", shape=(*b_batch, k, n), dtype=dtype)
    fn = ir.Function([a, b], op.matmul(a, b))
    rng = np.random.default_rng(m)
    inputs = {
        "a": rng.standard_normal((*a_batch, m, k)).astype(dtype),
        "b": rng.standard_normal((*b_batch, k, n)).astype(dtype),
    }
    with pm.PassContext(config={"codegen.num_threads": 2}):
        exe = codegen.build(fn)
    if m * n * k > 1 << 16:
        assert exe.kernel_kinds() == {"blas": 1}
    assert_allclose(exe.run(**inputs), ir.interpret(fn, **inputs))


@given(st.booleans(), st.booleans(), st.sampled_from([1, 4]), st.sampled_from([1, 4]))
def test_batch_matmul_transposes_and_broadcast(ta: bool, tb: bool, bx: int, by: int) -> None:
    m, k, n = 50, 64, 30
    x_shape = (bx, k, m) if ta else (bx, m, k)
    y_shape = (by, n, k) if tb else (by, k, n)
    x, y = ir.var("x", shape=x_shape), ir.var("y", shape=y_shape)
    fn = ir.Function([x, y], op.batch_matmul(x, y, transpose_a=ta, transpose_b=tb))
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal(x_shape).astype("float32")}
    inputs["y"] = rng.standard_normal(y_shape).astype("float32")
    assert_allclose(codegen.build(fn).run(**inputs), ir.interpret(fn, **inputs))


def test_integer_products_run_without_blas() -> None:
    a, b = ir.var("a", shape=(64, 80), dtype="int32"), ir.var("b", shape=(80, 30), dtype="int32")
    fn = ir.Function([a, b], op.matmul(a, b))
    rng = np.random.default_rng(0)
    inputs = {"a": rng.integers(-5, 5, (64, 80)).astype("int32")}
    inputs["b"] = rng.integers(-5, 5, (80, 30)).astype("int32")
    np.testing.assert_array_equal(codegen.build(fn).run(**inputs), ir.interpret(fn, **inputs))


@given(
    st.sampled_from(["dense", "matmul"]),
    st.sampled_from(["float32", "float64"]),
    st.sampled_from([1, 2]),
    st.integers(130, 1100),
)
def test_one_row_products_run_as_blas_gemv(kind: str, dtype: str, threads: int, n: int) -> None:
    """A batch-1 classifier (x of one row times a constant matrix; N not a multiple of 16
    or float64, so BLAS takes it): GEMV on each thread's columns, the interpreter's
    result."""
    assume(n % 16 or dtype == "float64")
    rng = np.random.default_rng(n)
    x = ir.var("x", shape=(1, 512), dtype=dtype)  # above the small-product size
    w = rng.standard_normal((n, 512) if kind == "dense" else (512, n)).astype(dtype)
    body = op.dense(x, ir.const(w)) if kind == "dense" else op.matmul(x, ir.const(w))
    fn = ir.Function([x], op.add(body, ir.const(np.ones(n, dtype))))
    with pm.PassContext(config={"codegen.num_threads": threads}):
        exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"blas": 1}
    assert ("egc_sgemv" if dtype == "float32" else "egc_dgemv") in exe.get_source()
    value = rng.standard_normal((1, 512)).astype(dtype)
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


def test_product_blocks_cover_the_output_once() -> None:
    product = blas.Product("float32", 10, 7, 3, False, False, ((0, 0, 0),))
    for parts in (1, 2, 3, 8, 20):
        rows = sorted((blk.c // 7, blk.m) for blk in product.blocks(parts))
        covered = [r for start, count in rows for r in range(start, start + count)]
        assert covered == list(range(10))
    wide = blas.Product("float32", 2, 100, 3, False, True, ((0, 0, 0),))
    columns = sorted((blk.c, blk.n) for blk in wide.blocks(4))
    assert sum(n for _, n in columns) == 100 and columns[0][0] == 0


def test_identical_groups_share_compiled_code() -> None:
    x = ir.var("x", shape=(8, 64))
    rng = np.random.default_rng(0)
    h = x
    for _ in range(4):  # four blocks of the same shapes, different weights
        bias = ir.const(rng.standard_normal((64,)).astype("float32"))
        h = op.tanh(op.add(op.multiply(h, bias), bias))
        h = op.softmax(h, axis=-1)
    fn = ir.Function([x], h)
    exe = codegen.build(fn)
    # groups: the first block, then softmax + the next block three times, then softmax
    assert exe.kernels_reused >= 2
    assert exe.get_source().count('define void @"k') < len(exe.graph.kernels())
    value = rng.standard_normal((8, 64)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))


def test_stages_return_typed_values() -> None:
    x = ir.var("x", shape=(4, 16))
    w = ir.const(np.ones((16, 16), "float32"))
    mod = ir.IRModule.from_expr(ir.Function([x], op.relu(op.matmul(op.exp(x), w))))
    optimised = optimise(mod, None)
    fused = fuse(optimised)
    graph, cache = lower(fused)
    devices = DevicePlan.host(graph)
    plan = plan_graph(graph, devices)
    assert [k.kind for k in graph.kernels()] == ["loops", "gemm"]
    assert plan.bytes >= 4 * 16 * 4  # exp's result lives in the arena until the product
    assert {k.name for k in unique_kernels(graph)} == {k.name for k in graph.kernels()}
    assert cache.hits == 0


@given(
    st.sampled_from([(64, 784), (1, 48), (3, 5, 32), (12, 100), (197, 64), (1, 13, 24)]),
    st.sampled_from([16, 32, 48, 96]),
    st.sampled_from(["dense", "matmul"]),
    st.booleans(),
)
@example((197, 64), 32, "dense", True)  # 24 blocks of 8 rows and a tail of 5 (ViT's tokens)
@example((1, 13, 24), 16, "matmul", False)
def test_products_on_constant_weights_use_packed_panels(shape, n, kind, epilogue) -> None:
    k = shape[-1]
    rng = np.random.default_rng(n)
    x = ir.var("x", shape=shape)
    w = rng.standard_normal((n, k)).astype("float32")  # as dense's weight; matmul takes w.T
    bias = rng.standard_normal((n,)).astype("float32")
    if kind == "dense":
        y = op.dense(x, ir.const(w))
    else:
        y = op.matmul(x, ir.const(np.ascontiguousarray(w.T)))
    if epilogue:
        y = op.relu(op.add(y, ir.const(bias)))
    fn = ir.Function([x], y)
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"gemm": 1}
    value = rng.standard_normal(shape).astype("float32")
    # any float32 summation order of K products is within K * 2^-24 * sum|x_i w_i| of the
    # exact value (the standard recursive-summation bound); relu and + bias keep that
    exact = value.astype("float64") @ w.T.astype("float64")
    bound = k * 2.0**-24 * (np.abs(value).astype("float64") @ np.abs(w.T).astype("float64"))
    if epilogue:
        exact = np.maximum(exact + bias, 0.0)
        bound = bound + 2.0**-24 * np.abs(exact)
    got = exe.run(x=value)
    assert got.dtype == np.float32 and got.shape == exact.shape
    assert np.all(np.abs(got - exact) <= bound + 1e-30)


def test_runs_from_several_python_threads_take_turns() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from egraph_ir import models

    with pm.PassContext(opt_level=3):
        exe = codegen.build(models.cnn())
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 3, 64, 64)).astype("float32") for _ in range(8)]
    expected = [exe.run(x=v) for v in inputs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda v: exe.run(x=v), inputs * 3))
    for k, value in enumerate(got):
        np.testing.assert_array_equal(value, expected[k % len(inputs)])


@given(
    st.sampled_from(
        [
            ("matmul", (5,), (5,)),
            ("matmul", (5,), (5, 3)),
            ("matmul", (2, 3, 5), (5,)),
            ("matmul", (2, 1, 4, 5), (3, 5, 6)),
            ("batch_matmul", (1, 4, 5), (3, 6, 5)),
            ("dense", (2, 3, 5), (4, 5)),
        ]
    ),
    st.sampled_from(["int32", "int64", "float32"]),
    st.booleans(),
)
def test_loop_products_of_every_rank_and_dtype(case, dtype, transpose_a) -> None:
    """Integer products (no BLAS) and small ones run as JIT loops, never the interpreter."""
    name, a_shape, b_shape = case
    attrs = {}
    if name == "batch_matmul" and transpose_a:
        a_shape = (a_shape[0], a_shape[2], a_shape[1])
        attrs = {"transpose_a": True}
    a, b = ir.var("a", shape=a_shape, dtype=dtype), ir.var("b", shape=b_shape, dtype=dtype)
    fn = ir.Function([a, b], op.call(name, a, b, **attrs))
    rng = np.random.default_rng(len(a_shape))
    inputs = {"a": rng.integers(-4, 5, a_shape).astype(dtype)}
    inputs["b"] = rng.integers(-4, 5, b_shape).astype(dtype)
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"loops": 1}
    np.testing.assert_array_equal(exe.run(**inputs), ir.interpret(fn, **inputs))


@given(
    st.sampled_from(["float32", "float64", "int8", "bool"]),
    st.tuples(st.integers(0, 5), st.integers(1, 7)),
    st.booleans(),
)
def test_the_runs_address_reader_agrees_with_numpy(dtype, shape, sliced) -> None:
    from codegen.runtime.runner import address_of

    array = np.zeros(shape, dtype)
    if sliced:
        array = array[1:, ::2]
    assert address_of(array) == array.ctypes.data


def test_inputs_that_need_converting_give_the_fast_paths_results() -> None:
    """A run takes ready arrays without copying and converts anything else first
    (lists, Fortran order, strided views, exact casts); every form gives one result, and
    each run's output is a new array."""
    x = ir.var("x", shape=(3, 4), dtype="float32")
    exe = codegen.build(ir.Function([x], op.multiply(x, ir.const(np.float32(2)))))
    ready = np.arange(12, dtype="float32").reshape(3, 4)
    first = exe.run(x=ready)
    np.testing.assert_array_equal(first, ready * 2)
    wide = np.zeros((3, 8), "float32")
    wide[:, ::2] = ready
    for other in (ready.tolist(), np.asfortranarray(ready), wide[:, ::2], ready.astype("int64")):
        np.testing.assert_array_equal(exe.run(x=other), ready * 2)
    again = exe.run({"x": ready})
    assert again is not first and np.array_equal(again, first)


def test_a_build_failing_while_its_modules_compile_leaves_no_answer_behind(monkeypatch) -> None:
    """A module goes to a compile helper as soon as it is emitted: when emitting the next
    one fails, the helper still compiling is stopped, so the next build cannot read its
    object file as one of its own."""
    from codegen.llvm import modules

    real, made = modules.emit_module, []

    def failing(*args, **kwargs):
        made.append(1)
        if len(made) == 2:  # the second module of the build (the first went to a helper)
            raise RuntimeError("emission failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(modules, "emit_module", failing)
    with pm.PassContext(config={"codegen.num_threads": 2}), pytest.raises(RuntimeError):
        codegen.build(models.transformer())
    monkeypatch.undo()
    assert len(made) == 2
    with pm.PassContext(config={"codegen.num_threads": 2}):
        exe = codegen.build(models.mlp())
    inputs = models.example_inputs("mlp")
    assert_allclose(exe.run(**inputs), ir.interpret(models.mlp(), **inputs))
