"""Placement as extraction: flexible matching (rules/builtin/offload.rules) lets a
product-only target take 1x1 convolutions, and rewrites are kept only where they pay."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.expr import Call
from egraph_ir.frontend import from_onnx
from egraph_ir.support import register_support, unregister_support
from egraph_ir.testing import assert_allclose
from egraph_ir.visitor import post_order

PRODUCTS = "products_only"  # a mock accelerator with a matrix unit and nothing else


@pytest.fixture(scope="module")
def products_only():
    register_support(PRODUCTS, "dense")
    yield PRODUCTS
    unregister_support(PRODUCTS)


def _flops(call: Call) -> float:
    types = [a.checked_type for a in call.args]
    return call.op.cost(types, call.checked_type, call.attrs).flops


def _table(target: str, speed_up: float, launch: float) -> pm.passes.PlacementCost:
    """Convolutions and products at 1 GFLOP/s on the host, products `speed_up` times
    faster on target, which costs `launch` per entering value; copies and the ops the
    rules add (transposes) free."""
    return pm.passes.cost_table(
        {
            ("conv2d", "default"): lambda c: _flops(c) / 1e9,
            ("dense", "default"): lambda c: _flops(c) / 1e9,
            ("matmul", "default"): lambda c: _flops(c) / 1e9,
            ("dense", target): lambda c: _flops(c) / 1e9 / speed_up,
        },
        launch={target: launch},
    )


def _ops(mod: ir.IRModule, compiler: str | None = None) -> list[str]:
    """Op names of the calls in mod's functions (of one external target only, if named)."""
    names = []
    for fn in mod.functions.values():
        if compiler is None or fn.attrs.get("Compiler") == compiler:
            names += [
                n.op.name
                for n in post_order(fn.body)
                if isinstance(n, Call) and isinstance(n.op, ir.Op)
            ]
    return names


def _conv_block(x: ir.Expr, cin: int, cout: int, k: int, seed: int) -> ir.Expr:
    rng = np.random.default_rng(seed)
    w = ir.const((rng.standard_normal((cout, cin, k, k)) * 0.2).astype("float32"))
    b = ir.const(rng.standard_normal(cout).astype("float32"))
    pad = (k // 2,) * 4
    return op.relu(op.bias_add(op.conv2d(x, w, padding=pad), b, axis=1))


def test_a_1x1_convolution_runs_as_a_product_where_that_pays(products_only) -> None:
    x = ir.var("x", shape=(1, 16, 8, 8))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], _conv_block(x, 16, 32, 1, 0))))
    flops = 2.0 * 64 * 32 * 16
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets([products_only], cost=_table(products_only, 10, 1e-6))(mod)
    stats = ctx.run.last("PlaceTargets", pm.passes.PlacementChoice)
    # the product on the target: its time and one launch (the transposed input enters)
    assert stats.cost == pytest.approx(flops / 1e10 + 1e-6)
    assert stats.rewritten_functions == 1 and stats.regions == 1
    assert _ops(placed, products_only) == ["dense"] and "conv2d" not in _ops(placed)
    value = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype("float32")
    assert_allclose(ir.interpret(placed, value), ir.interpret(mod, value))

    table = _table(products_only, 10, 1e-6)
    for exact in ({"rules": "none"}, {"fast_math": False}):  # no product: all stays home
        with pm.PassContext() as ctx:
            pm.passes.PlaceTargets([products_only], cost=table, **exact)(mod)
        assert ctx.run.last("PlaceTargets").cost == pytest.approx(flops / 1e9)


def test_a_rewrite_no_target_pays_for_is_not_kept(products_only) -> None:
    x = ir.var("x", shape=(1, 16, 8, 8))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], _conv_block(x, 16, 32, 1, 0))))
    slow = _table(products_only, 10, launch=1.0)  # a launch dearer than the whole product
    with pm.PassContext() as ctx:
        placed = pm.passes.PlaceTargets([products_only], cost=slow)(mod)
    assert ctx.run.last("PlaceTargets").rewritten_functions == 0
    assert ir.structural_equal(placed["main"], mod["main"])


def test_a_matmul_with_a_transposed_constant_is_offloaded_without_inventing_a_bias(
    products_only,
) -> None:
    x = ir.var("x", shape=(64, 32))
    w = ir.const(np.random.default_rng(2).standard_normal((48, 32)).astype("float32"))
    mod = ir.infer_type(
        ir.IRModule.from_expr(ir.Function([x], op.matmul(x, op.transpose(w, (1, 0)))))
    )
    with pm.PassContext():
        placed = pm.passes.PlaceTargets([products_only], cost=_table(products_only, 10, 1e-7))(mod)
    assert _ops(placed, products_only) == ["dense"]
    assert "add" not in _ops(placed) and "bias_add" not in _ops(placed)
    value = np.random.default_rng(3).standard_normal((64, 32)).astype("float32")
    assert_allclose(ir.interpret(placed, value), ir.interpret(mod, value))


@st.composite
def _convnets(draw) -> ir.IRModule:
    """Two to five conv + bias + relu/clip blocks with 1x1 and 3x3 kernels, a residual add
    where the channels agree."""
    channels = draw(st.sampled_from([4, 8]))
    x = ir.var("x", shape=(1, channels, 6, 6))
    h: ir.Expr = x
    for i in range(draw(st.integers(2, 5))):
        cout = draw(st.sampled_from([4, 8]))
        block = _conv_block(h, channels, cout, draw(st.sampled_from([1, 1, 3])), seed=i)
        if draw(st.booleans()):
            block = op.clip(block, 0.0, 6.0)
        if cout == channels and draw(st.booleans()):
            block = op.add(block, h)
        h, channels = block, cout
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], h)))


@given(data=st.data())
@settings(max_examples=25, deadline=None)
def test_flexible_placement_is_sound_and_never_costlier_than_exact(products_only, data) -> None:
    mod = data.draw(_convnets())
    cost = _table(
        products_only,
        data.draw(st.sampled_from([0.5, 2.0, 20.0])),
        data.draw(st.sampled_from([1e-8, 1e-6, 1e-4])),
    )
    with pm.PassContext() as ctx:
        flexible = pm.passes.PlaceTargets([products_only], cost=cost)(mod)
    with pm.PassContext() as exact_ctx:
        pm.passes.PlaceTargets([products_only], cost=cost, rules="none")(mod)
    assert ctx.run.last("PlaceTargets").cost <= exact_ctx.run.last("PlaceTargets").cost * (1 + 1e-9)
    value = (
        np.random.default_rng(4)
        .standard_normal(mod["main"].params[0].checked_type.shape)
        .astype("float32")
    )
    assert_allclose(ir.interpret(flexible, value), ir.interpret(mod, value))


def test_a_product_only_target_finds_the_1x1_convolutions_of_mobilenet_v2(
    products_only, shared_models, real_model
) -> None:  # counts of the real export: skipped without ../shared
    path, inputs, expected = real_model("mobilenet_v2")
    mod = ir.infer_type(from_onnx(onnx.load(path)))
    convs = [
        n
        for n in post_order(mod["main"].body)
        if isinstance(n, Call) and getattr(n.op, "name", "") == "conv2d"
    ]
    pointwise = [c for c in convs if c.args[1].checked_type.shape[2:] == (1, 1)]
    assert (len(convs), len(pointwise)) == (52, 34)
    cost = _table(products_only, 10, 1e-6)
    exact = pm.passes.PlaceTargets([products_only], cost=cost, rules="none")(mod)
    assert _ops(exact, products_only) == ["dense"]  # the classifier only
    flexible = pm.passes.PlaceTargets([products_only], cost=cost)(mod)
    assert _ops(flexible, products_only) == ["dense"] * 35  # and every 1x1 convolution

    register_support("blas", "dense")  # the same placement on a real product target runs
    blas = pm.passes.PlaceTargets(["blas"], cost=_table("blas", 10, 1e-6))(mod)
    assert _ops(blas, "blas") == ["dense"] * 35
    # float32 through 52 layers, products summed in another order: 1e-4 as the real-model tests
    np.testing.assert_allclose(codegen.build(blas).run(**inputs), expected, rtol=1e-4, atol=1e-4)


def test_placement_keeps_random_programs_equal_and_typed() -> None:
    """passmgr.testing.check_pass on random programs: a mock target that runs every op ten
    times faster than the host for a launch of half a host op, so programs split."""
    from egraph_ir.registry import list_ops
    from passmgr.testing import check_pass

    target = "mock_everything"
    for name in list_ops():
        register_support(target, name)

    def op_cost(call: Call, t: str) -> float:
        return 1.0 if t == "default" else 0.1

    try:
        placing = pm.passes.PlaceTargets([target], pm.passes.PlacementCost(op_cost, {target: 0.5}))
        report = check_pass(placing, max_examples=40, idempotent=False)
        assert report.ok, report.failure
        assert report.examples >= 40
    finally:
        unregister_support(target)


def _joint_brute_force(fn: ir.Function, targets, cost, rewrites) -> float:
    """The cheapest (program in the saturated e-graph, placement) by trying them all."""
    import itertools

    from egraph_ir.egraph.encode import encode
    from egraph_ir.egraph.extract import to_ir
    from egraph_ir.egraph.graph import TensorEGraph
    from egraph_ir.egraph.ilp import extractable
    from egraph_ir.egraph.saturate import saturate
    from egraph_ir.errors import CompilerError
    from passmgr.passes.partition.placement.model import placement_cost, problem_of

    g = TensorEGraph()
    handle = encode(g, fn.body)
    g.flush()
    saturate(g, rewrites)
    snap = g.snapshot()
    root = snap.handle_class[handle]
    classes = extractable(snap.by_class, root)
    keys = sorted(classes, key=str)
    best = float("inf")
    for combo in itertools.product(*(classes[c] for c in keys)):
        try:
            body = to_ir(g, dict(zip(keys, combo, strict=True)), root)
        except CompilerError:
            continue  # a cyclic choice
        problem = problem_of(ir.infer_type(ir.Function(fn.params, body)), targets, cost)
        for pick in itertools.product(*(sorted(problem.choices[c]) for c in problem.calls)):
            place = dict(zip(problem.calls, pick, strict=True))
            best = min(best, placement_cost(problem, place, cost))
    return best


JOINT = ("products_only", "mock_pointwise")


@st.composite
def _product_chains(draw) -> ir.Function:
    """One to three steps over a (4, 8) input: products written three ways (dense, matmul
    of a transposed constant, bias first) and relus."""
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    x = ir.var("x", shape=(4, 8))
    h: ir.Expr = x
    for _ in range(draw(st.integers(1, 3))):
        w = ir.const(rng.standard_normal((8, 8)).astype("float32"))
        step = draw(st.sampled_from(["dense", "matmul", "bias-first", "relu"]))
        if step == "dense":
            h = op.dense(h, w)
        elif step == "matmul":
            h = op.matmul(h, op.transpose(w, (1, 0)))
        elif step == "bias-first":
            h = op.add(ir.const(rng.standard_normal(8).astype("float32")), op.dense(h, w))
        else:
            h = op.relu(h)
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], h)))["main"]


@given(data=st.data())
@settings(max_examples=30, deadline=None)
def test_placement_over_the_egraph_is_the_brute_force_optimum(products_only, data) -> None:
    from passmgr.passes.partition.placement.extract import place_by_extraction
    from passmgr.passes.partition.placement.model import placement_cost, problem_of
    from passmgr.passes.partition.placement.targets import _rewrites

    register_support("mock_pointwise", "add")
    register_support("mock_pointwise", "relu")
    try:
        fn = data.draw(_product_chains())
        table = {}
        for name in ("dense", "matmul", "add", "relu", "transpose"):
            table[(name, "default")] = float(data.draw(st.integers(0, 9)))
        table[("dense", PRODUCTS)] = float(data.draw(st.integers(0, 9)))
        for name in ("add", "relu"):
            table[(name, "mock_pointwise")] = float(data.draw(st.integers(0, 9)))
        launch = {t: float(data.draw(st.integers(0, 6))) for t in JOINT}
        cost = pm.passes.cost_table(table, launch, per_byte=data.draw(st.integers(0, 2)) / 1000)
        rewrites = _rewrites("offload")
        found = place_by_extraction(fn, JOINT, cost, rewrites, ir.egraph.Limits(), 10.0)
        assert found is not None
        got = placement_cost(problem_of(found.function, JOINT, cost), found.place, cost)
        assert got == pytest.approx(_joint_brute_force(fn, JOINT, cost, rewrites), rel=1e-6)
    finally:
        unregister_support("mock_pointwise")


@pytest.fixture
def constant_weight_products():
    """A product target with TVM's usual predicate: only products of constant weights."""
    target = "dense_of_constants"
    register_support(target, "dense", lambda call: isinstance(call.args[1], ir.Constant))
    yield target
    unregister_support(target)


def _placed_products(mod: ir.IRModule, target: str) -> int:
    placed = pm.passes.PlaceTargets([target], cost=_table(target, 10, 1e-6))(mod)
    return _ops(placed, target).count("dense")


def _mlp_onnx(gemm: bool) -> ir.IRModule:
    """A 3-layer MLP as PyTorch exports it: Gemm nodes, or MatMul + Add."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    nodes, inits, h = [], [], "x"
    for i, (n_in, n_out) in enumerate([(64, 128), (128, 128), (128, 10)]):
        w = rng.standard_normal((n_out, n_in) if gemm else (n_in, n_out)).astype("float32")
        b = rng.standard_normal(n_out).astype("float32")
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        if gemm:
            nodes.append(helper.make_node("Gemm", [h, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        else:
            nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [f"m{i}"]))
            nodes.append(helper.make_node("Add", [f"m{i}", f"b{i}"], [f"g{i}"]))
        h = f"g{i}"
        if i < 2:
            nodes.append(helper.make_node("Relu", [h], [f"r{i}"]))
            h = f"r{i}"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, [32, 10])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return ir.infer_type(from_onnx(model))


def test_flexible_matching_does_not_depend_on_how_the_model_or_target_is_written(
    constant_weight_products, products_only, real_model
) -> None:
    """A constant-weight predicate sees the rewritten weight as a constant (it saw
    squeeze(const) and took 2 of MobileNetV2's 35 products), and a MatMul+Add export is
    offloaded like the Gemm export (it got none)."""
    target = constant_weight_products
    assert _placed_products(_mlp_onnx(gemm=True), target) == 3
    assert _placed_products(_mlp_onnx(gemm=False), target) == 3
    path, _, _ = real_model("mobilenet_v2")  # the real export, or one built in code
    mod = ir.infer_type(from_onnx(onnx.load(path)))
    placed = _placed_products(mod, target)
    assert placed == _placed_products(mod, products_only)  # the predicate costs none
    if path.parent.name == "real":
        assert placed == 35  # every 1x1 convolution and the classifier
