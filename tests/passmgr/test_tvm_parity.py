"""Behaviours from TVM's tests that issue 19 found missing. Pass infrastructure
(tests/python/relay/test_pass_manager.py, test_pass_instrument.py): re-typed function-pass
results, contexts exited out of order, the immutable-module check, instruments and config
values checked when given, config keys of packages not imported yet, a default context that
does not grow, override_instruments(None). Standard passes (test_pass_fold_constant.py,
test_pass_simplify_inference.py): let-bound constants and constant conditions folded,
batch_norm unpacked on any axis."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.errors import ConfigError, PassError
from egraph_ir.testing import assert_allclose, assert_structural_equal

from .helpers import small_module


def test_a_function_pass_result_is_typed_again() -> None:
    @pm.function_pass(opt_level=0, name="Untyped")
    def untyped(fn, mod, ctx):
        return ir.Function(fn.params, op.negative(fn.body))  # built fresh: no types yet

    out = untyped(small_module())
    assert out["main"].body.has_type
    assert out["main"].body.checked_type == ir.TensorType((2, 3), "float32")


def test_contexts_exited_out_of_order_raise_and_leave_no_stale_context() -> None:
    outer, inner = pm.PassContext(opt_level=1), pm.PassContext(opt_level=3)
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(ConfigError, match="out of order"):
        outer.__exit__(None, None, None)
    assert pm.PassContext.current() is inner  # outer is gone from the stack
    inner.__exit__(None, None, None)
    assert pm.PassContext.current() is not inner and pm.PassContext.current() is not outer


def test_a_pass_that_changes_its_input_in_place_is_caught_and_undone() -> None:
    @pm.module_pass(opt_level=0, name="Sneaky")
    def sneaky(mod, ctx):
        x = ir.var("x", shape=(1,))
        mod._funcs["extra"] = ir.Function([x], x)  # writes the caller's module
        return mod

    mod = small_module()
    with pytest.raises(PassError, match=r"Sneaky.*changed its input module in place"):
        sneaky(mod)
    assert list(mod) == ["main"]  # the input is intact


@pytest.mark.parametrize("bad", ["A", ["A"], 3, [None]])
def test_instruments_are_checked_when_the_context_is_made(bad) -> None:
    with pytest.raises(ConfigError, match="PassInstrument"):
        pm.PassContext(instruments=bad)


def test_config_values_are_checked_when_given() -> None:
    with pytest.raises(
        ConfigError, match="one of arena, conflicts, hill-climb, tokens; got 'nope'"
    ):
        pm.PassContext(config={"codegen.memory_planner": "nope"})
    with pytest.raises(ConfigError, match="expects int"):
        pm.PassContext(config={"eqsat.node_limit": "many"})


def test_codegen_config_keys_exist_before_codegen_is_imported() -> None:
    script = (
        "import sys, passmgr as pm\n"
        "assert 'codegen' not in sys.modules\n"
        "ctx = pm.PassContext(config={'codegen.num_threads': 1})\n"
        "print(ctx.get_config('codegen.memory_planner'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "arena"


def test_the_default_context_keeps_only_the_latest_run() -> None:
    default = pm.PassContext.current()
    assert default.is_default
    for _ in range(50):
        pm.passes.EliminateCommonSubexpr()(small_module())
    run = pm.PassRun.current()
    assert len(run.optional_passes) <= 1
    assert len(run.records) == 1 and run.records[0][0] == "EliminateCommonSubexpr"


def test_override_instruments_with_none_clears_them() -> None:
    with pm.PassContext(instruments=[pm.PassTimingInstrument()]) as ctx:
        pm.override_instruments(None)
        assert ctx.instruments == []


# ---------------------------------------------------------------- standard passes
def _typed(text: str) -> ir.IRModule:
    return ir.infer_type(ir.parse(text))


def test_fold_constant_inlines_let_bound_constants() -> None:
    # TVM's test_fold_let: the binding of a constant expression disappears
    mod = _typed(
        """
        def @main(%y: Tensor[(2, 3), float32]) {
          let %x = add(1f, 2f);
          let %z = multiply(%x, 2f);
          add(%y, %z)
        }"""
    )
    want = _typed("def @main(%y: Tensor[(2, 3), float32]) { add(%y, 6f) }")
    assert_structural_equal(pm.passes.FoldConstant()(mod), want)


def test_fold_constant_takes_the_branch_of_a_constant_condition() -> None:
    mod = _typed(
        """
        def @main(%x: Tensor[(2, 3), float32]) {
          %0 = greater(2f, 1f);
          if (%0) { negative(%x) } else { exp(%x) }
        }"""
    )
    want = _typed("def @main(%x: Tensor[(2, 3), float32]) { negative(%x) }")
    assert_structural_equal(pm.passes.FoldConstant()(mod), want)


@pytest.mark.parametrize(
    "shape, axis", [((2, 3, 4), 1), ((2, 3, 4, 5, 6), 2), ((5, 3), 0), ((2, 3, 4, 5), -3)]
)
def test_simplify_inference_unpacks_batch_norm_on_any_axis(shape, axis) -> None:
    rng = np.random.default_rng(0)
    x = ir.var("x", shape=shape)
    c = shape[axis]
    gamma, beta, mean = (ir.const(rng.random(c).astype("float32")) for _ in range(3))
    var = ir.const((rng.random(c) + 0.5).astype("float32"))
    bn = op.batch_norm(x, gamma, beta, mean, var, axis=axis)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], ir.TupleGetItem(bn, 0))))
    out = pm.passes.SimplifyInference()(mod)
    assert "batch_norm" not in str(out)
    value = rng.random(shape).astype("float32")
    # the rewrite reassociates (fast-math): float32 within a few ulps
    assert_allclose(ir.interpret(out, value), ir.interpret(mod, value))


def test_fuse_ops_fuses_through_let_and_the_result_compiles() -> None:
    import codegen

    mod = _typed("def @main(%x: Tensor[(2, 3), float32]) { let %t = exp(%x); add(%t, %t) }")
    fused = pm.passes.FuseOps()(mod)
    calls = [e for e in ir.post_order(fused["main"].body) if isinstance(e, ir.Function)]
    assert len(calls) == 1  # exp and add in one primitive function
    value = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    assert_allclose(codegen.build(mod)(value), 2 * np.exp(value))


def test_fuse_ops_at_opt_level_0_makes_one_group_per_op() -> None:
    mod = _typed("def @main(%x: Tensor[(2, 3), float32]) { add(exp(%x), 1f) }")
    with pm.PassContext(opt_level=0):
        fused = pm.passes.FuseOps()(mod)
    groups = [e for e in ir.post_order(fused["main"].body) if isinstance(e, ir.Function)]
    assert len(groups) == 2
    with pm.PassContext(opt_level=2):
        assert len([e for e in ir.post_order(pm.passes.FuseOps()(mod)["main"].body)
                    if isinstance(e, ir.Function)]) == 1  # fmt: skip


@pytest.mark.parametrize("axis", [-1, 0])
def test_fuse_ops_fuses_softmax_with_a_following_cast(axis: int) -> None:
    import codegen

    mod = _typed(
        f"def @main(%x: Tensor[(16, 8), float32]) {{ cast(softmax(%x, axis={axis}), "
        'dtype="float16") }'
    )
    expected = _typed(
        f"""def @main(%x: Tensor[(16, 8), float32]) {{
          %0 = fn (%p0: Tensor[(16, 8), float32], Primitive=1) -> Tensor[(16, 8), float16] {{
            cast(softmax(%p0, axis={axis}), dtype="float16")
          }};
          %0(%x)
        }}"""
    )
    assert_structural_equal(pm.passes.FuseOps()(mod), expected)
    value = np.random.default_rng(1).standard_normal((16, 8)).astype("float32")
    exe = codegen.build(mod)
    assert [k.kind for k in exe.graph.kernels()] == ["loops"]  # one native kernel
    assert_allclose(exe(value), ir.interpret(mod, value))  # float16's tolerance


def test_fuse_ops_default_depth_is_256_and_such_a_group_compiles() -> None:
    """TVM's test_fuse_max: a chain of n exps makes ceil(n / 256) groups."""
    import codegen

    x = ir.var("x", shape=(4, 8))
    h: ir.Expr = x
    for k in range(300):  # transposes make the element reads change index too
        h = op.transpose(h, axes=(1, 0)) if k % 3 == 2 else op.tanh(h)
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], h)))
    fused = pm.passes.FuseOps()(mod)
    sizes = sorted(
        sum(isinstance(n, ir.Call) and not isinstance(n.op, ir.Function)
            for n in ir.post_order(f.body))
        for f in ir.post_order(fused["main"].body) if isinstance(f, ir.Function)
    )  # fmt: skip
    assert sizes == [44, 256]
    with pm.PassContext(opt_level=0):  # keep the chain as written
        exe = codegen.build(fused)
    value = np.random.default_rng(2).standard_normal((4, 8)).astype("float32")
    assert_allclose(exe(value), ir.interpret(mod, value))


# FoldScaleAxis (test_pass_fold_scale_axis.py): backward through relu, bias and a sum of two
# convolutions, forward into the weights, scalars too
def _scale_cases():
    rng = np.random.default_rng(0)

    def c(*shape, positive=False):
        v = rng.standard_normal(shape).astype("float32")
        return ir.const(np.abs(v) + 0.1 if positive else v)

    x = ir.var("x", shape=(1, 3, 8, 8))
    w, w2, b = c(4, 3, 3, 3), c(4, 3, 3, 3), c(4)
    k = c(4, 1, 1, positive=True)
    conv = lambda weight: op.conv2d(x, weight, padding=(1, 1))  # noqa: E731
    return x, {
        "conv_bias_relu": op.multiply(op.relu(op.bias_add(conv(w), b, axis=1)), k),
        "sum_of_two_convs": op.multiply(op.add(conv(w), conv(w2)), k),
        "forward_input_scale": op.conv2d(op.multiply(x, c(3, 1, 1)), w, padding=(1, 1)),
        "scalar_after_conv": op.multiply(conv(w), ir.const(2.0)),
    }


@pytest.mark.parametrize("case", list(_scale_cases()[1]))
def test_fold_scale_axis_leaves_no_multiply(case: str) -> None:
    x, bodies = _scale_cases()
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], bodies[case])))
    with pm.PassContext(opt_level=3):
        out = pm.Sequential([pm.passes.FoldScaleAxis(), pm.passes.FoldConstant()])(mod)
    assert "multiply" not in str(out)
    value = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype("float32")
    # the scale moves into the weights: float32 sums of 27 products, reassociated
    np.testing.assert_allclose(
        ir.interpret(out, value), ir.interpret(mod, value), rtol=1e-4, atol=1e-5
    )


def test_a_negative_scale_does_not_cross_relu() -> None:
    x = ir.var("x", shape=(1, 4, 2, 2))
    k = ir.const(-np.ones((4, 1, 1), "float32"))
    mod = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], op.multiply(op.relu(x), k))))
    with pm.PassContext(opt_level=3):
        out = pm.passes.FoldScaleAxis()(mod)
    assert "relu" in str(out) and str(out).index("relu") < str(out).index("multiply")


def test_an_opt_level_3_build_keeps_no_final_scale() -> None:
    import codegen

    x, bodies = _scale_cases()
    fn = ir.Function([x], bodies["scalar_after_conv"])
    with pm.PassContext(opt_level=3):
        exe = codegen.build(fn)
    assert exe.optimized_module is not None and "multiply" not in str(exe.optimized_module)


def test_fuse_ops_fuses_inside_and_around_an_if() -> None:
    mod = _typed(
        """
        def @main(%c: bool, %x: Tensor[(2, 3), float32]) {
          %0 = exp(%x);
          %1 = if (%c) { add(multiply(%0, 2f), 1f) } else { negative(relu(%x)) };
          subtract(%1, sqrt(abs(%x)))
        }"""
    )
    out = pm.passes.FuseOps()(mod)
    groups = [e for e in ir.post_order(out["main"]) if isinstance(e, ir.Function)]
    assert sum(1 for g in groups if g.attrs.get("Primitive")) == 3  # two branches, one after
    value = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    for cond in (True, False):
        assert_allclose(
            ir.interpret(out, np.array(cond), value), ir.interpret(mod, np.array(cond), value)
        )
