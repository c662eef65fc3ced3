"""Partitioning for several targets: TVM's behaviours for AnnotateTarget,
MergeCompilerRegions, PartitionGraph and MergeComposite, compared structurally with
hand-written expected modules, plus random programs with random support sets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import egraph_ir as ir
import passmgr as pm
import rules
from egraph_ir import op
from egraph_ir.errors import PassError, RuleError
from egraph_ir.expr import Call, Function
from egraph_ir.registry import Op
from egraph_ir.testing import assert_allclose, assert_structural_equal, programs

T = "test_target"


@pytest.fixture(autouse=True)
def _targets():
    for name in ("abs", "relu", "add", "exp", "log"):
        op.register_support(T, name)
    op.register_support("other", "tanh")
    op.register_support("other", "subtract")
    yield
    op.unregister_support(T)
    op.unregister_support("other")


def begin(x, t=T):
    return op.compiler_begin(x, compiler=t)


def end(x, t=T):
    return op.compiler_end(x, compiler=t)


def module(fn: ir.Function) -> ir.IRModule:
    return ir.infer_type(ir.IRModule.from_expr(fn))


def diamond() -> tuple[ir.IRModule, ir.Var]:
    """TVM's diamond: abs feeds relu (supported) and tanh (not); both meet in an add."""
    x = ir.var("data", shape=(10, 10))
    o1 = op.abs(x)
    o2 = op.relu(o1)
    X = op.tanh(o1)
    o3 = op.add(o2, X)
    return module(ir.Function([x], op.subtract(o3, X))), x


# ---------------------------------------------------------------- AnnotateTarget
def test_annotate_target_puts_begin_and_end_on_every_edge() -> None:
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.tanh(op.relu(x))))
    out = pm.passes.AnnotateTarget([T])(mod)
    r = op.relu(begin(x))
    t = op.tanh(begin(end(r), "default"))
    expected = ir.Function([x], end(t, "default"))
    assert_structural_equal(out["main"], expected)


def test_annotate_target_gives_each_consumer_its_own_end() -> None:
    x = ir.var("x", shape=(4,))
    a = op.abs(x)
    mod = module(ir.Function([x], op.add(op.exp(a), op.log(a))))
    out = pm.passes.AnnotateTarget([T])(mod)
    ends = [n for n in ir.post_order(out["main"].body) if _is(n, "compiler_end")]
    abs_ends = [e for e in ends if _is(e.args[0], "abs")]
    assert len(abs_ends) == 2 and abs_ends[0] is not abs_ends[1]


def test_annotate_target_is_idempotent_and_composes() -> None:
    mod, _ = diamond()
    once = pm.passes.AnnotateTarget([T])(mod)
    assert_structural_equal(pm.passes.AnnotateTarget([T])(once), once)
    both = pm.passes.AnnotateTarget([T, "other"])(mod)
    step = pm.passes.AnnotateTarget(["other"])(once)
    assert_structural_equal(step, both)
    targets = {
        n.attrs["compiler"] for n in ir.post_order(both["main"].body) if _is(n, "compiler_end")
    }
    assert targets == {T, "other"}


def test_annotate_target_priority_is_the_list_order() -> None:
    op.register_support("other", "relu")
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.relu(x)))
    first = pm.passes.AnnotateTarget(["other", T])(mod)
    assert first["main"].body.attrs["compiler"] == "other"
    second = pm.passes.AnnotateTarget([T, "other"])(mod)
    assert second["main"].body.attrs["compiler"] == T


def test_support_predicates_see_types() -> None:
    op.register_support("f64only", "exp", lambda call: call.checked_type.dtype == "float64")
    try:
        for dtype, target in (("float64", "f64only"), ("float32", "default")):
            x = ir.var("x", shape=(3,), dtype=dtype)
            out = pm.passes.AnnotateTarget(["f64only"])(module(ir.Function([x], op.exp(x))))
            assert out["main"].body.attrs["compiler"] == target
    finally:
        op.unregister_support("f64only")


def test_tuples_follow_their_fields_or_stay_outside() -> None:
    x = ir.var("x", shape=(4,))
    tup = ir.Tuple((op.relu(x), op.abs(x)))
    mod = module(ir.Function([x], op.exp(ir.TupleGetItem(tup, 0))))
    inside = pm.passes.PartitionGraph()(
        pm.passes.MergeCompilerRegions()(pm.passes.AnnotateTarget([T])(mod))
    )
    assert len(inside.functions) == 2  # one region holds the tuple too
    outside = pm.passes.AnnotateTarget([T], include_non_call_ops=False)(mod)
    tuples = [n for n in ir.post_order(outside["main"].body) if isinstance(n, ir.Tuple)]
    assert all(_is(f, "compiler_end") for f in tuples[0].fields)
    v = np.arange(4, dtype="float32") - 2
    assert_allclose(ir.interpret(inside, v), ir.interpret(mod, v))


# ---------------------------------------------------------------- MergeCompilerRegions
def test_merge_regions_diamond_matches_tvm() -> None:
    mod, _ = diamond()
    out = pm.passes.MergeCompilerRegions()(pm.passes.AnnotateTarget([T])(mod))
    x = out["main"].params[0]
    o1 = op.abs(begin(x))
    o2 = op.relu(o1)  # abs and relu merged: their end/begin pair is gone
    X = op.tanh(begin(end(o1), "default"))
    o3 = op.add(begin(end(o2)), begin(end(X, "default")))  # not merged with abs: a cycle
    o4 = op.subtract(begin(end(o3), "default"), begin(end(X, "default"), "default"))
    assert_structural_equal(out["main"], ir.Function([x], end(o4, "default")))


def test_merge_regions_restrictions_propagate_through_other_targets() -> None:
    x = ir.var("x", shape=(4,))
    a = op.abs(x)  # T
    t = op.tanh(a)  # other
    s = op.subtract(t, t)  # other: merges with tanh
    y = op.add(a, s)  # T: must not merge with abs (abs -> tanh -> subtract -> add)
    mod = module(ir.Function([x], op.relu(y)))
    out = pm.passes.PartitionGraph()(
        pm.passes.MergeCompilerRegions()(pm.passes.AnnotateTarget([T, "other"])(mod))
    )
    regions = sorted(
        (str(f.attrs["Compiler"]), sorted(_ops(f)))
        for g, f in out.functions.items()
        if g.name_hint != "main"
    )
    assert regions == [("other", ["subtract", "tanh"]), (T, ["abs"]), (T, ["add", "relu"])]
    v = np.linspace(-2, 2, 4, dtype="float32")
    assert_allclose(ir.interpret(out, v), ir.interpret(mod, v))


def test_default_regions_merge_too() -> None:
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.sigmoid(op.tanh(op.relu(x)))))
    out = pm.passes.MergeCompilerRegions()(pm.passes.AnnotateTarget([T])(mod))
    defaults = [
        n
        for n in ir.post_order(out["main"].body)
        if _is(n, "compiler_begin") and n.attrs["compiler"] == "default"
    ]
    assert len(defaults) == 1  # tanh and sigmoid: one default region


# ---------------------------------------------------------------- PartitionGraph
def test_partition_graph_multi_output_region_and_names() -> None:
    mod, _ = diamond()
    out = pm.passes.PartitionGraph()(
        pm.passes.MergeCompilerRegions()(pm.passes.AnnotateTarget([T])(mod))
    )
    names = sorted(g.name_hint for g in out.functions)
    assert names == ["main", f"tvmgen_default_{T}_main_0", f"tvmgen_default_{T}_main_1"]
    first = out[f"tvmgen_default_{T}_main_0"]
    assert dict(first.attrs) == {
        "Primitive": 1,
        "Inline": 1,
        "Compiler": T,
        "global_symbol": f"tvmgen_default_{T}_main_0",
    }
    p = ir.var(f"{T}_0_i0", shape=(10, 10))
    a = op.abs(p)
    assert_structural_equal(first, ir.Function([p], ir.Tuple((op.relu(a), a)), attrs=first.attrs))


def test_partition_graph_does_not_duplicate_an_output_used_twice() -> None:
    x = ir.var("x", shape=(4,))
    r = op.relu(x)
    mod = module(ir.Function([x], op.subtract(op.tanh(r), op.tanh(op.exp(r)))))
    out = pm.passes.PartitionGraph()(
        pm.passes.MergeCompilerRegions()(pm.passes.AnnotateTarget([T])(mod))
    )
    region = out[f"tvmgen_default_{T}_main_0"]
    assert isinstance(region.body, ir.Tuple) and len(region.body.fields) == 2  # relu, exp
    v = np.linspace(-1, 1, 4, dtype="float32")
    assert_allclose(ir.interpret(out, v), ir.interpret(mod, v))


def test_partition_graph_binds_constants_unless_told_not_to() -> None:
    x = ir.var("x", shape=(3,))
    c = ir.const(np.array([1.0, 2.0, 3.0], "float32"))
    mod = module(ir.Function([x], op.tanh(op.add(x, c))))
    annotated = pm.passes.AnnotateTarget([T])(mod)
    bound = pm.passes.PartitionGraph()(annotated)[f"tvmgen_default_{T}_main_0"]
    assert len(bound.params) == 1
    free = pm.passes.PartitionGraph(bind_constants=False)(annotated)
    assert len(free[f"tvmgen_default_{T}_main_0"].params) == 2
    v = np.ones(3, "float32")
    assert_allclose(ir.interpret(free, v), ir.interpret(mod, v))


def test_partitioned_functions_are_left_alone_by_host_passes() -> None:
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.add(op.relu(x), ir.const(0.0))))
    part = pm.passes.PartitionGraph()(pm.passes.AnnotateTarget([T])(mod))
    region = part[f"tvmgen_default_{T}_main_0"]
    with pm.PassContext(opt_level=3):
        after = pm.Sequential([pm.passes.AlgebraicSimplify(), pm.passes.FuseOps()])(part)
    assert after[f"tvmgen_default_{T}_main_0"] is region


def test_region_optimizer_hook_runs_on_each_new_function() -> None:
    seen = []
    pm.passes.register_region_optimizer(T, lambda fn: seen.append(fn) or fn)
    try:
        mod, _ = diamond()
        pm.passes.partition_for([T])(mod)
    finally:
        pm.passes.register_region_optimizer(T, None)
    assert len(seen) == 2


def test_hand_written_regions_that_form_a_cycle_are_refused() -> None:
    x = ir.var("x", shape=(4,))
    a = op.abs(begin(x))
    t = op.tanh(begin(end(a), "other"))
    y = op.add(a, begin(end(t, "other")))  # abs and add in one region around tanh: a cycle
    bad = module(ir.Function([x], end(y)))
    with pytest.raises(PassError, match="cycle"):
        pm.passes.PartitionGraph()(bad)


# ---------------------------------------------------------------- MergeComposite
def test_merge_composite_names_and_parameters() -> None:
    x = ir.var("x", shape=(2, 8))
    w = ir.const(np.ones((4, 8), "float32"))
    b = ir.const(np.ones(4, "float32"))
    mod = module(ir.Function([x], op.relu(op.add(op.dense(x, w), b))))
    out = pm.passes.MergeComposite(rules.builtin_patterns("blas"))(mod)
    call = out["main"].body
    assert isinstance(call, Call) and isinstance(call.op, Function)
    assert call.op.attrs["Composite"] == "blas.dense"
    assert call.op.attrs["PartitionedFromPattern"] == "dense_add_relu_"
    assert [p.name_hint for p in call.op.params] == ["x", "w", "b"]
    assert call.args[0] is x
    v = np.random.default_rng(0).random((2, 8), dtype=np.float32)
    assert_allclose(ir.interpret(out, v), ir.interpret(mod, v))


def test_merge_composite_optional_parts_and_nothing_invented() -> None:
    x = ir.var("x", shape=(2, 8))
    w = ir.const(np.ones((4, 8), "float32"))
    mod = module(ir.Function([x], op.tanh(op.dense(x, w))))
    out = pm.passes.MergeComposite(rules.builtin_patterns("blas"))(mod)
    composite = out["main"].body.args[0].op
    assert composite.attrs["PartitionedFromPattern"] == "dense_"  # no bias was made up


def test_merge_composite_priority_and_overlap() -> None:
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.relu(op.add(op.abs(x), x))))
    table = [("a.add_relu", "relu(add(?p, ?q))"), ("b.abs_add", "add(abs(?p), ?q)")]
    out = pm.passes.MergeComposite(table)(mod)
    assert out["main"].body.op.attrs["Composite"] == "a.add_relu"
    swapped = pm.passes.MergeComposite(list(reversed(table)))(mod)
    inner = swapped["main"].body.args[0]
    assert inner.op.attrs["Composite"] == "b.abs_add"


def test_merge_composite_check_sees_the_typed_root() -> None:
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.relu(op.abs(x))))
    seen = []

    def check(root: Call) -> bool:
        seen.append(root.checked_type)
        return False

    out = pm.passes.MergeComposite([("t.relu_abs", "relu(abs(?x))", check)])(mod)
    assert seen and all(isinstance(t, ir.TensorType) for t in seen)  # typed roots
    assert ir.structural_equal(out, mod)  # every match refused


def test_merge_composite_skips_a_match_whose_inner_value_is_used_elsewhere() -> None:
    x = ir.var("x", shape=(4,))
    a = op.abs(x)
    mod = module(ir.Function([x], op.add(op.relu(a), a)))
    out = pm.passes.MergeComposite([("t.relu_abs", "relu(abs(?x))")])(mod)
    assert ir.structural_equal(out, mod)


def test_tuple_projection_patterns() -> None:
    x = ir.var("x", shape=(4, 6))
    mod = module(ir.Function([x], op.relu(ir.TupleGetItem(op.split(x, 2, axis=1), 1))))
    out = pm.passes.MergeComposite([("t.split_relu", "relu(split(?x).1)")])(mod)
    fn = out["main"].body.op
    assert fn.attrs["PartitionedFromPattern"] == "split_TupleGetItem1_relu_"


def test_composites_go_to_the_target_their_name_starts_with() -> None:
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.tanh(op.relu(op.abs(x)))))
    flow = pm.passes.partition_for(["t"], table=[("t.relu_abs", "relu(abs(?x))")])
    out = flow(mod)
    region = out["tvmgen_default_t_main_0"]
    assert region.body.op.attrs["Composite"] == "t.relu_abs"
    v = np.linspace(-1, 1, 4, dtype="float32")
    assert_allclose(ir.interpret(out, v), ir.interpret(mod, v))


def test_pattern_files_report_file_line_col(tmp_path) -> None:
    bad = tmp_path / "bad.patterns"
    bad.write_text("pattern t.x\n    relu(nosuchop(?x))\n")
    with pytest.raises(RuleError, match=r"bad.patterns:2:10: unknown op 'nosuchop'"):
        rules.load_patterns(bad)
    with pytest.raises(RuleError, match=r":1:1: expected 'pattern NAME'"):
        rules.parse_patterns("rule x\n  relu(?x) => ?x\n")
    with pytest.raises(RuleError, match=r":2:14: a pattern has no right-hand side"):
        rules.parse_patterns("pattern t.y\n    relu(?x) => ?x\n")
    with pytest.raises(RuleError, match="optional op"):
        rules.parse("rule r [t]\n    relu?(?x) => ?x\n")


# ---------------------------------------------------------------- random programs
def _ops(fn: ir.Function) -> list[str]:
    return [
        n.op.name for n in ir.post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)
    ]


def _is(e: ir.Expr, name: str) -> bool:
    return isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == name


@settings(max_examples=30)
@given(programs(max_nodes=10), st.data())
def test_random_programs_partition_soundly_and_stably(case, data) -> None:
    mod = case.mod
    names = sorted(set(_ops(mod["main"])))
    targets = ["ta", "tb"]
    try:
        for n in names:
            t = data.draw(st.sampled_from([*targets, None]), label=n)
            if t is not None:
                op.register_support(t, n)
        out = pm.passes.partition_for(targets)(mod)
        again = pm.passes.partition_for(targets)(out)
    finally:
        for t in targets:
            op.unregister_support(t)
    assert_structural_equal(again, out)  # partitioning twice changes nothing
    for g, fn in out.functions.items():
        if g.name_hint != "main":
            assert fn.attrs["Compiler"] in targets
    assert not any(
        _is(n, "compiler_begin") or _is(n, "compiler_end") for n in ir.post_order(out["main"].body)
    )
    expected = ir.interpret(mod, **case.inputs)
    assert_allclose(ir.interpret(out, **case.inputs), expected)


# ---------------------------------------------------------------- size
def test_a_10000_op_chain_partitions_without_recursion() -> None:
    x = ir.var("x", shape=(4,))
    y = x
    for i in range(10_000):
        y = op.relu(y) if i % 50 else op.tanh(y)
    mod = module(ir.Function([x], y))
    out = pm.passes.partition_for([T])(mod)  # about 2 s here (no time is asserted)
    regions = [g for g in out.functions if g.name_hint != "main"]
    assert len(regions) == 200  # relu runs between the host's tanh calls


def test_a_densenet_sized_graph_with_fan_out_partitions() -> None:
    x = ir.var("x", shape=(8,))
    features = [x]
    for i in range(300):
        a = features[-1]
        b = features[max(0, len(features) - 1 - (i % 7))]
        y = op.add(a, b)
        features.append(op.relu(y) if i % 3 else op.tanh(y))
    mod = module(ir.Function([x], features[-1]))
    out = pm.passes.partition_for([T])(mod)
    v = np.linspace(-1, 1, 8, dtype="float32") * 1e-3
    assert_allclose(ir.interpret(out, v), ir.interpret(mod, v))


def test_pipeline_text_and_symbol_sanitising() -> None:
    text = "AnnotateTarget(targets=[my-dsp.v2]),MergeCompilerRegions,PartitionGraph(bind_constants=false)"
    flow = pm.parse_pipeline(text)
    assert str(flow) == text
    op.register_support("my-dsp.v2", "relu")
    try:
        x = ir.var("x", shape=(4,))
        out = flow(module(ir.Function([x], op.tanh(op.relu(x)))))
    finally:
        op.unregister_support("my-dsp.v2")
    fn = out["tvmgen_default_my_dsp_v2_main_0"]
    assert fn.attrs["Compiler"] == "my-dsp.v2"
    assert [p.name_hint for p in fn.params] == ["my_dsp_v2_0_i0"]
    everything_default = pm.passes.AnnotateTarget()(out)  # the RFC's "annotate default"
    ends = [n for n in ir.post_order(everything_default["main"].body) if _is(n, "compiler_end")]
    assert ends and {e.attrs["compiler"] for e in ends} == {"default"}


def test_a_pass_as_region_optimizer_rewrites_the_region() -> None:
    """`register_region_optimizer(T, FoldConstant())`, a TVM idiom, was a no-op: function
    passes skip `Compiler` functions. The region is optimised and keeps its attributes."""
    x = ir.var("x", shape=(4,))
    folded = op.add(ir.const(np.ones(4, "float32")), ir.const(np.ones(4, "float32")))
    mod = module(ir.Function([x], op.exp(op.add(x, folded))))
    pm.passes.register_region_optimizer(T, pm.passes.FoldConstant())
    try:
        part = pm.passes.partition_for([T])(mod)
    finally:
        pm.passes.register_region_optimizer(T, None)
    (region,) = [f for f in part.functions.values() if f.attrs.get("Compiler") == T]
    assert region.attrs["Primitive"] and region.attrs["global_symbol"]
    names = [n.op.name for n in ir.post_order(region.body) if isinstance(n, ir.Call)]
    assert names.count("add") == 1  # the constant sum was folded inside the region
    v = np.linspace(-1, 1, 4, dtype="float32")
    assert_allclose(ir.interpret(part, v), ir.interpret(mod, v))


def test_annotate_target_types_an_untyped_module_and_reports_a_broken_predicate() -> None:
    """Alone on an untyped module, a predicate reading types silently refused every call;
    now the module is typed first, and a predicate that raises is an error naming it."""
    op.register_support("typed_only", "exp", lambda c: c.args[0].checked_type.dtype == "float32")
    op.register_support("broken", "exp", lambda c: c.no_such_field)
    try:
        x = ir.var("x", shape=(4,))
        untyped = ir.IRModule.from_expr(ir.Function([x], op.exp(x)))
        out = pm.passes.AnnotateTarget(["typed_only"])(untyped)
        assert out["main"].body.attrs["compiler"] == "typed_only"
        with pytest.raises(ir.CompilerError, match="predicate of target 'broken' for 'exp'"):
            pm.passes.AnnotateTarget(["broken"])(ir.IRModule.from_expr(ir.Function([x], op.exp(x))))
    finally:
        op.unregister_support("typed_only")
        op.unregister_support("broken")


def test_inline_replaces_marked_functions_and_keeps_external_regions() -> None:
    """TVM's Inline: global functions marked Inline=1 are inlined at their calls (their own
    marked callees first) and dropped; external regions stay; recursion is refused."""
    mod = ir.parse(
        """
        def @double(%a: Tensor[(4,), float32], Inline=1) { add(%a, %a) }
        def @square_double(%b: Tensor[(4,), float32], Inline=1) {
          %0 = @double(%b);
          multiply(%0, %0)
        }
        def @main(%x: Tensor[(4,), float32]) { exp(@square_double(%x)) }
        """
    )
    mod = ir.infer_type(mod)
    parted = pm.passes.partition_for([T])(mod)  # exp and add go to T: an Inline=1 region
    with pm.PassContext() as ctx:
        out = pm.passes.Inline()(mod)
    assert sorted(g.name_hint for g in out.functions) == ["main"]
    assert ctx.run.last("Inline").inlined == 2
    v = np.linspace(-1, 1, 4, dtype="float32")
    assert_allclose(ir.interpret(out, v), ir.interpret(mod, v))
    kept = pm.passes.Inline()(parted)
    assert any(f.attrs.get("Compiler") for f in kept.functions.values())
    loop = ir.parse(
        """
        def @f(%a: Tensor[(4,), float32], Inline=1) { @g(%a) }
        def @g(%a: Tensor[(4,), float32], Inline=1) { @f(%a) }
        def @main(%x: Tensor[(4,), float32]) { @f(%x) }
        """
    )
    with pytest.raises(ir.CompilerError, match="reaches itself"):
        pm.passes.Inline()(loop)


def test_a_tuple_of_constants_read_by_a_region_is_bound_into_it() -> None:
    """bind_constants binds constants; a tuple made of constants became a parameter of the
    region instead."""
    x = ir.var("x", shape=(2,))
    consts = ir.Tuple([ir.const(np.ones(2, "float32")), ir.const(np.full(2, 3.0, "float32"))])
    body = op.add(op.exp(x), ir.TupleGetItem(consts, 1))
    mod = module(ir.Function([x], body))
    part = pm.passes.partition_for([T])(mod)
    (region,) = [f for f in part.functions.values() if f.attrs.get("Compiler") == T]
    assert [p.checked_type for p in region.params] == [x.checked_type]  # only x comes in
    v = np.array([1.0, -2.0], "float32")
    assert_allclose(ir.interpret(part, v), ir.interpret(mod, v))


def test_siblings_that_share_only_an_input_are_one_region() -> None:
    """relu(x) and tanh(x) on one target were two functions (two launches) while the
    placement model charged one entry for x; now one function reads x once. A path
    between two readers through the host keeps them apart (one region would depend on
    itself)."""
    x = ir.var("x", shape=(4,))
    mod = module(ir.Function([x], op.subtract(op.relu(x), op.abs(x))))
    part = pm.passes.partition_for([T])(mod)
    regions = [f for f in part.functions.values() if f.attrs.get("Compiler") == T]
    assert len(regions) == 1 and len(regions[0].params) == 1
    apart = module(ir.Function([x], op.add(op.relu(op.tanh(op.exp(x))), op.abs(x))))
    part2 = pm.passes.partition_for([T])(apart)  # exp on T, tanh on "other", relu on T
    v = np.linspace(-1, 1, 4, dtype="float32")
    for m, p in ((mod, part), (apart, part2)):
        assert_allclose(ir.interpret(p, v), ir.interpret(m, v))
