"""codegen.build of a program with symbolic dimensions: one SymbolicExecutable that runs
every consistent shape, equal to the interpreter; save and load keep it symbolic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op


def _encoder_layer() -> ir.IRModule:
    """A transformer block's shape code over (batch, seq, 16): a dense layer on the rows
    (batch * seq, 16), a reshape back, attention scores per batch, softmax, a residual."""
    batch, seq = ir.size_var("batch"), ir.size_var("seq")
    x = ir.var("x", shape=(batch, seq, 16), dtype="float32")
    rng = np.random.default_rng(0)
    w = ir.const(rng.standard_normal((16, 16)).astype("float32") * 0.25)
    rows = op.reshape(x, newshape=(batch * seq, 16))
    dense = op.reshape(op.dense(rows, w), newshape=(batch, seq, 16))
    scores = op.batch_matmul(dense, x)  # (batch, seq, seq)
    attn = op.softmax(scores, axis=-1)
    mixed = op.batch_matmul(attn, op.transpose(x, axes=(0, 2, 1)))
    out = op.add(op.tanh(mixed), x)
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], out)))


def test_one_build_runs_every_shape_like_the_interpreter(tmp_path: Path) -> None:
    mod = _encoder_layer()
    exe = codegen.build(mod)
    assert isinstance(exe, codegen.SymbolicExecutable)
    assert str(exe.input_types["x"]) == "Tensor[(batch, seq, 16), float32]"
    assert exe.size_names == ["batch", "seq"]
    assert exe.optimised_once  # the rule pipeline ran on the symbolic program
    rng = np.random.default_rng(1)
    shapes = [(1, 1), (2, 7), (3, 16), (2, 7)]
    for batch, seq in shapes:
        x = rng.standard_normal((batch, seq, 16)).astype("float32")
        # float32 sums of 16 and of seq products in another order than numpy's
        np.testing.assert_allclose(exe(x), ir.interpret(mod, x), rtol=1e-5, atol=1e-5)
    # every group takes its extents at run time (the BLAS products' too): one program,
    # compiled with the build at its capacity (16 each), serves every shape that fits
    assert exe.for_every_size is not None and len(exe.compiles) == 1
    step = exe.specialization(batch=3, seq=16)
    assert step.at is not None and step.input_types["x"].shape == (3, 16, 16)
    assert exe.specialization(batch=2, seq=7) is exe.specializations[(("batch", 2), ("seq", 7))]
    # the arena fits any sizes whose tensors fit it: (1, 40) does, (2, 50) needs more
    # room for its scores (2 x 50 x 50 > 16 x 16 x 16) and builds again, at seq 64
    for batch, seq in [(1, 40), (2, 50), (9, 3)]:
        x = rng.standard_normal((batch, seq, 16)).astype("float32")
        np.testing.assert_allclose(exe(x), ir.interpret(mod, x), rtol=1e-5, atol=1e-5)
    assert [dict(sizes) for sizes, _ in exe.compiles] == [
        {"batch": 16, "seq": 16},
        {"batch": 16, "seq": 64},
    ]
    path = tmp_path / "layer.egc"
    exe.save(str(path))
    loaded = codegen.load(str(path))
    assert isinstance(loaded, codegen.SymbolicExecutable)
    assert loaded.for_every_size is not None and not loaded.compiles  # loaded, not compiled
    x = rng.standard_normal((3, 16, 16)).astype("float32")
    np.testing.assert_array_equal(loaded(x), exe(x))
    x = rng.standard_normal((1, 5, 16)).astype("float32")  # a new size, after loading
    np.testing.assert_allclose(loaded(x), ir.interpret(mod, x), rtol=1e-5, atol=1e-5)
    assert not loaded.compiles
    assert loaded.optimised_once


def test_inputs_that_disagree_on_a_size_are_one_clear_error() -> None:
    seq = ir.size_var("seq")
    a = ir.var("a", shape=(seq, 4), dtype="float32")
    b = ir.var("b", shape=(seq, 4), dtype="float32")
    exe = codegen.build(ir.Function([a, b], op.add(a, b)))
    with pytest.raises(ir.CodegenError, match=r"dimension 'seq' is 40 here but 37"):
        exe(np.zeros((37, 4), "float32"), np.zeros((40, 4), "float32"))
    with pytest.raises(ir.CodegenError, match=r"size variables are seq; give each one"):
        exe.specialization(sq=3)
    with pytest.raises(ir.CodegenError, match="no specialisation is compiled yet"):
        exe.latest()


def test_only_the_most_recent_specialisations_stay() -> None:
    """A program not built for every size (a BLAS product that broadcasts its batch axes
    is described per size) keeps its `capacity` most recently used specialisations."""
    n = ir.size_var("n")
    x = ir.var("x", shape=(2, 3, n, 64), dtype="float32")
    y = ir.var("y", shape=(3, 64, n), dtype="float32")
    with pm.PassContext(config={"codegen.size_bounds": {"n": "1..4096"}}):  # BLAS, then
        exe = codegen.build(ir.Function([x, y], op.matmul(x, y)))
    assert exe.for_every_size is None and not exe.compiles
    exe.capacity = 2
    for size in (1, 2, 3, 1):
        exe(np.zeros((2, 3, size, 64), "float32"), np.zeros((3, 64, size), "float32"))
    assert [dict(k)["n"] for k in exe.specializations] == [3, 1]
    assert len(exe.compiles) == 4  # 1 was evicted before its second use


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 9), st.integers(1, 40), st.sampled_from(["sum", "max", "mean"]))
def test_reductions_and_broadcasts_at_drawn_sizes(rows: int, cols: int, reduce: str) -> None:
    """A symbolic program compiled once and run at drawn sizes (0 rows included)."""
    r, c = ir.size_var("r"), ir.size_var("c")
    x = ir.var("x", shape=(r, c), dtype="float32")
    y = ir.var("y", shape=(c,), dtype="float32")
    body = getattr(op, reduce)(op.multiply(x, y), axis=(1,), keepdims=True)
    fn = ir.Function([x, y], op.subtract(x, body))
    exe = _built(reduce, fn)
    rng = np.random.default_rng(rows * 100 + cols)
    a = rng.standard_normal((rows, cols)).astype("float32")
    b = rng.standard_normal(cols).astype("float32")
    want = ir.interpret(ir.infer_type(ir.IRModule.from_expr(fn)), a, b)
    np.testing.assert_allclose(exe(a, b), want, rtol=1e-5, atol=1e-5)


_BUILT: dict[str, codegen.SymbolicExecutable] = {}


def _built(key: str, fn: ir.Function) -> codegen.SymbolicExecutable:
    """One build per program across the drawn examples (the point: compiled once)."""
    if key not in _BUILT:
        exe = codegen.build(fn)
        assert isinstance(exe, codegen.SymbolicExecutable)
        _BUILT[key] = exe
    return _BUILT[key]


@pytest.mark.slow
def test_the_shared_dynamic_models_compile_once_and_match_onnxruntime(
    shared_models: Path, tmp_path: Path
) -> None:
    """BERT (batch, seq) and GPT-2's decoder step (past 0 included): one build each, run
    at several shapes against ONNX Runtime, and again after save and load. 1e-4: the
    issue's tolerance (float32 sums of 128 products, reassociated)."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(2)

    def bert(batch: int, seq: int) -> dict[str, np.ndarray]:
        mask = np.ones((batch, seq), np.int64)
        mask[-1, seq // 2 :] = 0
        ids = rng.integers(0, 30522, (batch, seq)).astype(np.int64)
        return {"input_ids": ids, "attention_mask": mask}

    def gpt2(past: int) -> dict[str, np.ndarray]:
        feeds = {"input_ids": np.array([[7]], np.int64)}
        feeds["attention_mask"] = np.ones((1, past + 1), np.int64)
        for name in ("past_0_k", "past_0_v", "past_1_k", "past_1_v"):
            feeds[name] = rng.standard_normal((1, 4, past, 32)).astype(np.float32)
        return feeds

    cases = {
        "bert_dyn_128_2.onnx": [bert(2, 37), bert(1, 1), bert(4, 20)],
        "gpt2_past_128_2_4.onnx": [gpt2(0), gpt2(16), gpt2(130)],
    }
    for name, feeds_list in cases.items():
        path = shared_models / "dynamic" / name
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        exe = codegen.build(path)
        assert isinstance(exe, codegen.SymbolicExecutable)
        saved = tmp_path / f"{name}.egc"
        for k, feeds in enumerate(feeds_list):
            if k == 2:  # the last shape after a save and a load
                exe.save(str(saved))
                exe = codegen.load(str(saved))
            got = exe.run_dict(feeds)
            for (out, value), want in zip(got.items(), session.run(None, feeds), strict=True):
                np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4, err_msg=out)


@settings(max_examples=8, deadline=None)
@given(ir.testing.symbolic_programs())
def test_random_symbolic_programs_compile_once_and_match_the_interpreter(case) -> None:
    """The op families of the random program generator over inputs with size variables
    (n, m; 0 included): optimised once on the symbolic program, then run at two drawn
    sets of sizes, each equal to the interpreter at those sizes; where the program is not
    well typed at some sizes (a mean over an axis of 0), both refuse them with the same
    message. The tolerance is the float32 one of the fixed-shape differential test
    (egraph_ir.testing.assert_allclose)."""
    exe = codegen.build(case.mod)
    assert isinstance(exe, codegen.SymbolicExecutable)
    for k, sizes in enumerate(case.sizes):
        inputs = case.inputs(sizes, seed=k)
        with np.errstate(all="ignore"):
            try:
                want = ir.interpret(case.mod, **inputs)
            except ir.TypeInferenceError as exc:
                with pytest.raises(ir.CodegenError) as refused:
                    exe(**inputs)
                assert str(exc).split(": ", 1)[1] in str(refused.value)
                continue
            got = exe(**inputs)
        ir.testing.assert_allclose(got, want)


def _decoder_step() -> ir.IRModule:
    """One attention step of a decoder with its KV cache: the new key and value joined to
    the cached ones (past rows), scores of the one query against past + 1 keys, softmax,
    the weighted values; the presents are outputs too, fed back as the next past."""
    past = ir.size_var("past")
    heads, d = 2, 8
    q = ir.var("q", shape=(1, heads, 1, d), dtype="float32")
    k = ir.var("k", shape=(1, heads, 1, d), dtype="float32")
    v = ir.var("v", shape=(1, heads, 1, d), dtype="float32")
    past_k = ir.var("past_k", shape=(1, heads, past, d), dtype="float32")
    past_v = ir.var("past_v", shape=(1, heads, past, d), dtype="float32")
    keys = op.concatenate([past_k, k], axis=2)
    values = op.concatenate([past_v, v], axis=2)
    scores = op.multiply(
        op.matmul(q, op.transpose(keys, axes=(0, 1, 3, 2))), ir.const(np.float32(d**-0.5))
    )
    out = op.matmul(op.softmax(scores, axis=-1), values)
    fn = ir.Function([q, k, v, past_k, past_v], ir.Tuple([out, keys, values]))
    return ir.infer_type(ir.IRModule.from_expr(fn))


def test_a_new_past_length_compiles_no_kernel() -> None:
    """Issue #49: the kernels of a decoder step take their extents at run time, and so
    do their launches in the glue, so a specialisation at a new past length compiles
    nothing; every length (0 included) equals the interpreter, generation style (the
    presents fed back)."""
    mod = _decoder_step()
    exe = codegen.build(mod)
    rng = np.random.default_rng(3)
    cache = {n: np.zeros((1, 2, 0, 8), "float32") for n in ("past_k", "past_v")}
    for past in range(6):
        new = {n: rng.standard_normal((1, 2, 1, 8)).astype("float32") for n in "qkv"}
        feeds = {**new, **cache}
        out, keys, values = exe(**feeds)
        want = ir.interpret(mod, **feeds)
        for got, expected in zip((out, keys, values), want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        cache = {"past_k": keys, "past_v": values}
        step = exe.specialization(past=past)
        assert step.kernels_for_every_size >= 3  # the joins, the scores, softmax, the sum
    # kernels and glue read the sizes: one program, compiled with the build, ran them all
    assert len(exe.compiles) == 1 and exe.for_every_size is not None


def test_a_product_on_packed_weights_takes_its_rows_at_run_time() -> None:
    """dense over batch * seq rows (a transformer's projection): the packed-weights
    kernel runs whole 8-row blocks and then the last rows one at a time, however many
    there are, from one compiled kernel (row counts under, at and over a block)."""
    batch, seq = ir.size_var("batch"), ir.size_var("seq")
    x = ir.var("x", shape=(batch, seq, 32), dtype="float32")
    rng = np.random.default_rng(4)
    w = ir.const(rng.standard_normal((48, 32)).astype("float32"))
    b = ir.const(rng.standard_normal(48).astype("float32"))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.add(op.dense(x, w), b))))
    exe = codegen.build(mod)
    for n, s in [(1, 1), (1, 8), (2, 9), (3, 7), (1, 0), (4, 33)]:
        a = rng.standard_normal((n, s, 32)).astype("float32")
        # float32 sums of 32 products, in blocks of another order than numpy's
        np.testing.assert_allclose(exe(a), ir.interpret(mod, a), rtol=1e-5, atol=1e-5)
        step = exe.specialization(batch=n, seq=s)
        assert step.kernels_for_every_size == 1
    assert len(exe.compiles) == 1  # one program serves every row count


def test_size_bounds_refuse_other_sizes_and_choose_kernels_for_the_largest(
    tmp_path: Path,
) -> None:
    """codegen.size_bounds: runs outside the bounds are one clear error; products are
    chosen for the upper bound (BLAS for 4096 rows, a loop nest for 4), and the bounds
    are kept by save and load."""
    n = ir.size_var("n")
    a = ir.var("a", shape=(1, n, 64), dtype="float32")
    b = ir.var("b", shape=(1, 64, n), dtype="float32")
    fn = ir.Function([a, b], op.batch_matmul(a, b, transpose_b=False))
    kinds = {}
    for high in (4, 4096):
        with pm.PassContext(config={"codegen.size_bounds": {"n": f"1..{high}"}}):
            exe = codegen.build(fn)
        x = np.ones((1, 3, 64), "float32")
        np.testing.assert_allclose(exe(x, x.transpose(0, 2, 1).copy()), np.full((1, 3, 3), 64.0))
        step = exe.specialization(n=3)
        kinds[high] = {type(k).__name__ for k in step.graph.kernels()}
        with pytest.raises(
            ir.CodegenError, match=rf"size n is {high + 1} here, outside its bounds 1..{high}"
        ):
            y = np.ones((1, high + 1, 64), "float32")
            exe(y, y.transpose(0, 2, 1).copy())
    assert kinds == {4: {"LoopKernel"}, 4096: {"GemmKernel"}}
    exe.save(str(tmp_path / "bounded.egc"))
    loaded = codegen.load(str(tmp_path / "bounded.egc"))
    with pytest.raises(ir.CodegenError, match=r"outside its bounds 1\.\.4096"):
        y = np.ones((1, 5000, 64), "float32")
        loaded(y, y.transpose(0, 2, 1).copy())
    bad = pm.PassContext(config={"codegen.size_bounds": {"m": [1, 4]}})
    with bad, pytest.raises(ir.CodegenError, match=r"names \['m'\]; the program's sizes are n"):
        codegen.build(fn)
    with pytest.raises(ir.ConfigError, match="need 0 <= low <= high"):
        pm.PassContext(config={"codegen.size_bounds": {"n": [5, 2]}})


@pytest.mark.slow
def test_a_real_cnn_with_a_symbolic_batch_compiles_once_and_matches_onnxruntime(
    shared_models: Path, tmp_path: Path
) -> None:
    """MobileNetV2 of ../shared/models/real with its batch made a size (`dim_param`, as
    exporters write dynamic axes): one build runs batch 1, 3 and 8 (depthwise and
    pointwise convolutions once per image) equal to ONNX Runtime within 1e-4."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model = onnx.load(shared_models / "real" / "mobilenet_v2.onnx")
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    del model.graph.value_info[:]
    path = tmp_path / "mobilenet_batch.onnx"
    onnx.save(model, path)
    exe = codegen.build(path)
    assert isinstance(exe, codegen.SymbolicExecutable) and exe.for_every_size is not None
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    rng = np.random.default_rng(7)
    for batch in (1, 3, 8):
        x = rng.standard_normal((batch, 3, 224, 224)).astype("float32")
        (want,) = session.run(None, {name: x})
        np.testing.assert_allclose(exe(x), want, rtol=1e-4, atol=1e-4)
    assert len(exe.compiles) == 1
