"""EqSat and the rule-based standard passes on the built-in models and on user rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

import egraph_ir as ir
import passmgr as pm
import rules
from egraph_ir import models, op
from egraph_ir.egraph import Stop
from egraph_ir.summary import summarize
from egraph_ir.testing import assert_same_outputs, assert_structural_equal, programs

DATA = Path(__file__).resolve().parents[2] / "data"


def run(mod: ir.IRModule, *passes: pm.Pass, **ctx_args) -> tuple[ir.IRModule, pm.PassContext]:
    with pm.PassContext(opt_level=3, **ctx_args) as ctx:
        out = pm.Sequential([pm.passes.InferType(), *passes])(mod)
    return out, ctx


def test_cnn_conv_batch_norm_pairs_become_one_conv2d_with_bias() -> None:
    mod = models.cnn()
    out, _ = run(
        mod, pm.passes.SimplifyInference(), pm.passes.FoldConstant(), pm.passes.FoldScaleAxis()
    )
    ops = summarize(out).ops
    assert ops["conv2d"] == 2 and ops["bias_add"] == 2
    assert "batch_norm" not in ops and "multiply" not in ops and ops["add"] == 1
    text = out.astext(show_meta=False)
    assert (
        "%0 = conv2d(%x, meta[Constant][0], padding=[1, 1, 1, 1]);\n  %1 = bias_add(%0, meta[Constant][1]);\n  %2 = relu(%1);"
        in text
    )
    x = models.example_inputs("cnn")
    np.testing.assert_allclose(ir.interpret(out, **x), ir.interpret(mod, **x), rtol=1e-5, atol=1e-6)


def test_simplify_inference_golden() -> None:
    before = ir.parse(
        """def @main(%x: Tensor[(2, 4), float32]) {
      %0 = dropout(%x, rate=0.2f64);
      %0.0
    }""".replace("0.2f64", "0.2")
    )
    out, _ = run(before, pm.passes.SimplifyInference())
    assert_structural_equal(out, ir.parse("def @main(%x: Tensor[(2, 4), float32]) { %x }"))


def test_transformer_layer_norms_are_simplified_and_outputs_agree() -> None:
    mod = models.transformer()
    out, ctx = run(mod, pm.passes.SimplifyInference(), pm.passes.AlgebraicSimplify())
    ops = summarize(out).ops
    assert "layer_norm" not in ops and ops["mean"] >= 4
    assert ctx.run.total("SimplifyInference", "rules_applied") == 2
    x = models.example_inputs("transformer")
    np.testing.assert_allclose(ir.interpret(out, **x), ir.interpret(mod, **x), rtol=1e-4, atol=1e-5)


def test_a_user_rule_file_runs_exactly_like_a_built_in_one() -> None:
    path = DATA / "user_example.rules"
    mod = ir.parse(
        "def @main(%x: Tensor[(3,), float32]) { exp(log(multiply(sqrt(%x), sqrt(%x)))) }"
    )
    plain, _ = run(mod, pm.passes.EqSat(rules=str(path)))
    assert str(plain["main"].body) == "%0 = log(%x);\nexp(%0)"
    fast, ctx = run(mod, pm.passes.EqSat(rules=str(path)), config={"eqsat.fast_math": True})
    assert fast["main"].body is fast["main"].params[0]
    assert ctx.run.total("EqSat", "rules_applied") >= 2
    from_set, _ = run(mod, pm.passes.EqSat(rules=rules.load(path), fast_math=True))
    assert_structural_equal(from_set, fast)
    pipeline = pm.parse_pipeline(f"InferType,EqSat(rules={path},fast_math=true,node_limit=500)")
    assert_structural_equal(pipeline(mod), fast)


def test_config_keys_limit_eqsat_and_bad_rule_names_fail_early() -> None:
    mod = ir.IRModule({"main": ir.Function(*_sum_chain(60))})
    _, ctx = run(
        mod, pm.passes.EqSat(rules="algebraic", fast_math=True), config={"eqsat.iter_limit": 1}
    )
    stopped = ctx.run.last("EqSat").stop_reason
    assert stopped.kind is Stop.ITERATION_LIMIT and str(stopped).startswith("iteration limit (")
    with pytest.raises(ir.RuleError, match="no built-in rule set 'nope'"):
        pm.passes.EqSat(rules="nope")
    with pytest.raises(ir.ConfigError, match=r"unknown config key 'eqsat.node_limt'"):
        pm.PassContext(config={"eqsat.node_limt": 5})


def _sum_chain(n: int):
    x = ir.var("x", shape=(2,))
    e: ir.Expr = x
    for i in range(n):
        e = ir.op.add(e, ir.const(np.full(2, i, "float32")))
    return [x], e


def test_standard_passes_respect_disabled_pass() -> None:
    mod = models.cnn()
    out, _ = run(mod, pm.passes.SimplifyInference(), disabled_pass=["SimplifyInference"])
    assert "batch_norm" in summarize(out).ops


def test_fold_constant_folds_whole_constant_subgraphs() -> None:
    mod = ir.parse("""def @main(%x: Tensor[(2,), float32]) {
      %0 = add([1f, 2f], multiply(2f, [3f, 4f]));
      %1 = split(%0, indices_or_sections=2);
      add(%x, %1.1)
    }""")
    out, ctx = run(mod, pm.passes.FoldConstant())
    assert_structural_equal(
        out, ir.parse("def @main(%x: Tensor[(2,), float32]) { add(%x, [10f]) }")
    )
    assert ctx.run.total("FoldConstant", "calls_folded") == 3


@given(programs(max_nodes=8))
def test_exact_built_in_rules_preserve_semantics_on_random_programs(case) -> None:
    passes = [pm.passes.AlgebraicSimplify(), pm.passes.CastCanonicalize(), pm.passes.FoldConstant()]
    out, _ = run(case.mod, *passes)
    assert_same_outputs(out, case.mod, case.inputs)


def test_eliminate_common_subexpr_computes_equal_terms_once() -> None:
    src = """def @main(%x: Tensor[(2, 3), float32]) {
      %0 = exp(add(%x, 1f));
      %1 = exp(add(%x, 1f));
      %2 = transpose(%0, axes=[1, 0]);
      %3 = transpose(%1, axes=[1, 0]);
      add(multiply(%2, %3), %3)
    }"""
    expected = """def @main(%x: Tensor[(2, 3), float32]) {
      %0 = transpose(exp(add(%x, 1f)), axes=[1, 0]);
      add(multiply(%0, %0), %0)
    }"""
    mod = ir.parse(src)
    out, _ = run(mod, pm.passes.EliminateCommonSubexpr())
    assert_structural_equal(out, ir.parse(expected))
    x = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    assert_same_outputs(out, mod, {"x": x})


def test_a_pass_skips_functions_no_rule_can_match() -> None:
    """No e-graph is built when no rule's left-hand side has all its ops in the function;
    a function with one of those ops is still saturated."""
    plain = ir.parse("def @main(%x: Tensor[(2, 4), float32]) { tanh(relu(%x)) }")
    out, ctx = run(plain, pm.passes.SimplifyInference())
    assert out["main"] is plain["main"]
    assert ctx.run.last("SimplifyInference").skipped
    _, ctx = run(models.transformer(), pm.passes.SimplifyInference())
    assert not any(r.skipped for r in ctx.run.reports("SimplifyInference"))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "cheap"])
def test_a_cost_model_must_return_finite_non_negative_costs(bad: object) -> None:
    x = ir.var("x", shape=(4,))
    mod = ir.IRModule.from_expr(ir.Function([x], op.negative(op.negative(op.exp(x)))))
    eqsat = pm.passes.EqSat(rules="algebraic", cost_model=lambda node, kids, out: bad)
    with pytest.raises(ir.CompilerError, match="costs must be finite and >= 0"):
        pm.Sequential([pm.passes.InferType(), eqsat])(mod)


def test_odd_variable_names_do_not_break_the_egraph() -> None:
    x = ir.var('x"y\\z', shape=(4,))
    mod = ir.IRModule.from_expr(ir.Function([x], op.negative(op.negative(x))))
    out = pm.Sequential([pm.passes.InferType(), pm.passes.EqSat("algebraic")])(mod)
    assert out["main"].body is out["main"].params[0]


@pytest.mark.parametrize("seconds", [float("nan"), -1.0, 0.0, float("inf")])
def test_limits_that_would_not_bound_are_errors(seconds: float) -> None:
    x = ir.var("x", shape=(4,))
    mod = ir.IRModule.from_expr(ir.Function([x], op.negative(op.negative(x))))
    pipeline = pm.Sequential([pm.passes.InferType(), pm.passes.EqSat("algebraic")])
    with pytest.raises(ir.ConfigError, match=r"seconds must be a positive finite|got NaN"):
        with_limit = pm.PassContext(config={"eqsat.time_limit_s": seconds})
        with with_limit:
            pipeline(mod)
