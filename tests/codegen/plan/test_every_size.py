"""One program for every size (codegen/plan/every_size.py): built once at a capacity, it
runs any sizes whose tensors fit, equal to the interpreter; larger sizes build it again;
sizes where a shape is 0 or 1 are typed first; runs at different sizes from several
threads do not mix their sizes."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op


def _products(
    transpose_a: bool, transpose_b: bool
) -> tuple[ir.IRModule, codegen.SymbolicExecutable]:
    """batch_matmul of two activations whose batch and extents are sizes, bounded high
    enough that BLAS is chosen: its blocks are cut from the sizes at run time."""
    b, m, k = ir.size_var("b"), ir.size_var("m"), ir.size_var("k")
    x = ir.var("x", shape=(b, k, m) if transpose_a else (b, m, k), dtype="float32")
    y = ir.var("y", shape=(b, m, k) if transpose_b else (b, k, m), dtype="float32")
    body = op.batch_matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x, y], op.tanh(body))))
    bounds = {"b": "1..8", "m": "1..256", "k": "1..256"}
    with pm.PassContext(config={"codegen.size_bounds": bounds}):
        exe = codegen.build(mod)
    assert isinstance(exe, codegen.SymbolicExecutable)
    return mod, exe


_PRODUCTS: dict[tuple[bool, bool], tuple[ir.IRModule, codegen.SymbolicExecutable]] = {}


@settings(max_examples=12, deadline=None)
@example(False, False, 2, 1, 64)  # one row: BLAS's GEMV
@example(False, True, 1, 1, 200)
@example(True, False, 3, 1, 5)
@given(st.booleans(), st.booleans(), st.integers(1, 8), st.integers(1, 256), st.integers(1, 256))
def test_blas_products_cut_their_blocks_at_run_time(
    transpose_a: bool, transpose_b: bool, b: int, m: int, k: int
) -> None:
    """Every drawn (b, m, k), rows or columns split over the threads or not, from the one
    build; float32 sums of up to 256 products in BLAS's order: 1e-4."""
    key = (transpose_a, transpose_b)
    if key not in _PRODUCTS:
        _PRODUCTS[key] = _products(*key)
    mod, exe = _PRODUCTS[key]
    rng = np.random.default_rng(b * 100_000 + m * 300 + k)
    x = rng.standard_normal((b, k, m) if transpose_a else (b, m, k)).astype("float32")
    y = rng.standard_normal((b, m, k) if transpose_b else (b, k, m)).astype("float32")
    np.testing.assert_allclose(exe(x, y), ir.interpret(mod, x, y), rtol=1e-4, atol=1e-4)
    assert exe.for_every_size is not None and len(exe.compiles) == 1
    kinds = {type(k).__name__ for k in exe.for_every_size.graph.kernels()}
    assert kinds == {"GemmKernel"}


def _scores() -> ir.IRModule:
    """Attention scores of one query over `past` keys, softmax, the weighted values."""
    past = ir.size_var("past")
    q = ir.var("q", shape=(2, 1, 8), dtype="float32")
    keys = ir.var("keys", shape=(2, past, 8), dtype="float32")
    scores = op.softmax(op.batch_matmul(q, keys), axis=-1)  # (2, 1, past)
    out = op.batch_matmul(scores, op.transpose(keys, axes=(0, 2, 1)))
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([q, keys], out)))


def test_sizes_beyond_the_capacity_build_again_and_a_saved_program_needs_no_build(
    tmp_path: Path,
) -> None:
    mod = _scores()
    exe = codegen.build(mod)
    assert isinstance(exe, codegen.SymbolicExecutable)
    rng = np.random.default_rng(5)
    for past in (1, 16, 17, 5, 40, 3):
        q = rng.standard_normal((2, 1, 8)).astype("float32")
        keys = rng.standard_normal((2, past, 8)).astype("float32")
        np.testing.assert_allclose(exe(q, keys), ir.interpret(mod, q, keys), rtol=1e-5, atol=1e-6)
    # 16 fits the first capacity, 17 builds at 32, 40 at 64; smaller ones fit that
    assert [dict(s)["past"] for s, _ in exe.compiles] == [16, 32, 64]
    assert exe.capacity_for({"past": 3}) == {"past": 64}  # never below the one built
    path = tmp_path / "scores.egc"
    exe.save(str(path))
    loaded = codegen.load(str(path))
    assert isinstance(loaded, codegen.SymbolicExecutable)
    assert loaded.for_every_size is not None
    for past in (2, 64, 33):
        q = rng.standard_normal((2, 1, 8)).astype("float32")
        keys = rng.standard_normal((2, past, 8)).astype("float32")
        np.testing.assert_array_equal(loaded(q, keys), exe(q, keys))
    assert not loaded.compiles
    with pytest.raises(ir.CodegenError, match="save the SymbolicExecutable it came from"):
        loaded.specialization(past=3).save(str(tmp_path / "one.egc"))
    # a profile says the sizes it measured and the kernels' shapes at them
    q = rng.standard_normal((2, 1, 8)).astype("float32")
    profile = loaded.profile({"q": q, "keys": rng.standard_normal((2, 5, 8)).astype("float32")})
    assert profile.sizes == {"past": 5}
    assert (2, 1, 5) in {k.shape for k in profile}


def test_sizes_where_a_shape_is_empty_are_typed_first() -> None:
    """At n = 0 the mean has no elements: the program is refused there with the
    interpreter's message, and runs at every other size from the one build."""
    n = ir.size_var("n")
    x = ir.var("x", shape=(n, 4), dtype="float32")
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.mean(x, axis=(0,)))))
    exe = codegen.build(mod)
    assert isinstance(exe, codegen.SymbolicExecutable) and exe.for_every_size is not None
    with pytest.raises(ir.TypeInferenceError) as expected:
        ir.interpret(mod, np.zeros((0, 4), "float32"))
    with pytest.raises(ir.CodegenError) as refused:
        exe(np.zeros((0, 4), "float32"))
    assert str(expected.value).split(": ", 1)[1] in str(refused.value)
    for rows in (1, 3, 9):
        x_value = np.arange(rows * 4, dtype="float32").reshape(rows, 4)
        np.testing.assert_allclose(exe(x_value), x_value.mean(axis=0), rtol=1e-6)
    assert len(exe.compiles) == 1


def test_the_smallest_sizes_are_typed_with_the_build_not_with_the_first_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A decoder's first steps (an empty past, then one key) meet shapes of 0 and 1, where
    the program is typed before it runs there: the build does that, so the first runs
    type nothing, and other sizes with the same shapes at 0 and 1 reuse the answer."""
    past = ir.size_var("past")
    q = ir.var("q", shape=(2, 1, 8), dtype="float32")
    cache = ir.var("cache", shape=(2, past, 8), dtype="float32")
    keys = op.concatenate([cache, q], axis=1)  # (2, past + 1, 8): the present
    scores = op.softmax(op.batch_matmul(q, keys), axis=-1)
    body = ir.Tuple([op.batch_matmul(scores, op.transpose(keys, axes=(0, 2, 1))), keys])
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([q, cache], body)))
    exe = codegen.build(mod)
    builds = exe._check_sizes.__self__  # the build's check (codegen/build.py)

    def typed_at(sizes: dict[str, int]) -> None:
        raise AssertionError(f"typed at {sizes} when run")

    monkeypatch.setattr(builds, "_fused_at", typed_at)
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 5):
        q_value = rng.standard_normal((2, 1, 8)).astype("float32")
        cache_value = rng.standard_normal((2, n, 8)).astype("float32")
        got, want = exe(q_value, cache_value), ir.interpret(mod, q_value, cache_value)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_runs_at_different_sizes_from_several_threads_keep_their_own() -> None:
    """The program's sizes are written under its lock with each run, so two threads that
    run it at different sizes at once each get their own results."""
    mod = _scores()
    exe = codegen.build(mod)
    rng = np.random.default_rng(6)
    cases = []
    for past in (3, 11):
        q = rng.standard_normal((2, 1, 8)).astype("float32")
        keys = rng.standard_normal((2, past, 8)).astype("float32")
        cases.append((q, keys, ir.interpret(mod, q, keys)))
    failures: list[str] = []

    def work(q: np.ndarray, keys: np.ndarray, want: np.ndarray) -> None:
        for _ in range(200):
            got = exe(q, keys)
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                failures.append(f"past {keys.shape[1]}: got {got.shape}")
                return

    threads = [threading.Thread(target=work, args=case) for case in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
