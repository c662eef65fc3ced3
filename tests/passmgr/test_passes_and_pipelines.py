"""Passes: decorators, function passes, failure atomicity, change tracking, pipelines,
bisection, registry errors, and a user's pass inserted into a pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import egraph_ir as ir
import passmgr as pm
from egraph_ir import op

from .helpers import Rename, negate_to_multiply, ran, small_module


def test_module_pass_decorator_bare_with_arguments_and_on_classes() -> None:
    with pytest.raises(ir.ConfigError, match="provide opt_level"):

        @pm.module_pass
        def no_level(mod, ctx):
            return mod

    @pm.module_pass(opt_level=1)
    def identity(mod, ctx):
        return mod

    assert isinstance(identity, pm.ModulePass) and identity.info == pm.PassInfo("identity", 1)

    @pm.module_pass(opt_level=2, name="AddMarker", required=["InferType"])
    class AddMarker:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def transform_module(self, mod, ctx):
            x = ir.var("x", shape=(1,))
            return mod.with_function(self.tag, ir.Function([x], x))

    p = AddMarker("marker")
    assert isinstance(p, pm.ModulePass)
    assert p.info == pm.PassInfo("AddMarker", 2, ("InferType",))
    assert "marker" in p(small_module())

    @pm.function_pass(opt_level=0)
    class NegToMul:
        def transform_function(self, fn, mod, ctx):
            return negate_to_multiply(fn)

    mod = ir.parse("def @main(%x: float32) { negative(%x) }")
    assert "multiply" in str(NegToMul()(mod))


def test_decorated_functions_with_wrong_signatures_are_rejected() -> None:
    with pytest.raises(
        TypeError, match=r"module_pass function '_f3' must take \(mod, ctx\); it takes \(a, b, c\)"
    ):
        pm.module_pass(opt_level=0)(_f3)
    with pytest.raises(TypeError, match=r"must take \(func, mod, ctx\)"):
        pm.function_pass(opt_level=0)(lambda mod: mod)
    with pytest.raises(TypeError, match="must define transform_module"):
        pm.module_pass(opt_level=0)(type("NoMethod", (), {}))
    with pytest.raises(ir.ConfigError, match="required must be a list"):
        pm.module_pass(opt_level=0, required="InferType")(lambda mod, ctx: mod)


def _f3(a, b, c):
    return a


def test_function_pass_skips_primitive_compiler_and_skip_optimization() -> None:
    text = "def @{}(%x: float32{}) {{ negative(%x) }}"
    mod = ir.parse(
        "\n".join(
            [
                text.format("main", ""),
                text.format("prim", ", Primitive=1"),
                text.format("ext", ', Compiler="dnnl"'),
                text.format("skip", ", SkipOptimization=1"),
            ]
        )
    )

    @pm.function_pass(opt_level=0)
    def neg_to_mul(fn, mod, ctx):
        return negate_to_multiply(fn)

    out = neg_to_mul(mod)
    assert "multiply" in str(out["main"])
    for name in ("prim", "ext", "skip"):
        assert out[name] is mod[name]


def test_a_failing_pass_leaves_the_input_intact_and_names_the_history() -> None:
    @pm.module_pass(opt_level=0, name="Explodes")
    def explode(mod, ctx):
        raise ValueError("boom")

    mod = small_module()
    before = str(mod)
    seq = pm.Sequential([pm.passes.InferType(), Rename("a"), explode, Rename("never")])
    with pytest.raises(ir.PassError, match=r"pass 'Explodes' failed after \[InferType, a\]: boom"):
        seq(mod)
    assert str(mod) == before and len(mod) == 1


def test_a_pass_must_return_a_module() -> None:
    @pm.module_pass(opt_level=0, name="ReturnsNone")
    def returns_none(mod, ctx):
        return None

    with pytest.raises(ir.PassError, match="'ReturnsNone' returned NoneType, expected an IRModule"):
        returns_none(small_module())

    @pm.function_pass(opt_level=0, name="ReturnsBody")
    def returns_body(fn, mod, ctx):
        return fn.body

    with pytest.raises(ir.PassError, match="returned Call for @main, expected a Function"):
        returns_body(small_module())


def test_change_tracking_fixed_point_and_repeat() -> None:
    assert not pm.passes.InferType().apply(small_module()).changed

    @pm.function_pass(opt_level=0, name="PeelNegative")
    def peel(fn, mod, ctx):
        body = fn.body
        if isinstance(body, ir.Call) and body.op.name == "negative":
            return ir.Function(fn.params, body.args[0])
        return fn

    x = ir.var("x", shape=(2,))
    e = x
    for _ in range(5):
        e = op.negative(e)
    mod = ir.IRModule.from_expr(ir.Function([x], e))
    assert peel.apply(mod).changed
    with pm.PassContext() as ctx:
        out = pm.FixedPoint(peel, max_iters=10)(mod)
    assert out["main"].body is x
    assert ctx.run.last("FixedPoint") == pm.FixedPointReport(6, False)  # five changes, one check
    out = pm.Repeat(peel, 2)(mod)
    assert str(out["main"].body).count("negative") == 3
    with pm.PassContext() as ctx:
        pm.FixedPoint(peel, max_iters=2)(mod)
    assert ctx.run.last("FixedPoint").hit_max_iters


def test_pipeline_text_round_trip_and_options() -> None:
    text = "InferType,DeadCodeElimination,PrintIR(header=after-dce,show_meta=true)"
    seq = pm.parse_pipeline(text)
    assert str(seq) == text
    assert [p.info.name for p in seq.passes] == ["InferType", "DeadCodeElimination", "PrintIR"]
    assert seq.passes[2].show_meta is True
    assert str(pm.parse_pipeline("InferType, PrintIR(show_meta=false)")) == "InferType,PrintIR"
    with pytest.raises(
        ir.ConfigError,
        match=r"unknown pass 'FuseOp' \(did you mean 'FuseOps'\?\); known: .*DeadCodeElimination, .*EqSat, .*InferType",
    ):
        pm.parse_pipeline("InferType,FuseOp")
    with pytest.raises(
        ir.ConfigError, match="pass 'PrintIR' has no option 'colour'; options: header, show_meta"
    ):
        pm.parse_pipeline("PrintIR(colour=red)")
    with pytest.raises(ir.ConfigError, match="option 'show_meta' expects bool"):
        pm.parse_pipeline("PrintIR(show_meta=maybe)")
    with pytest.raises(ir.ConfigError, match="expected ','"):
        pm.parse_pipeline("InferType DeadCodeElimination")


def test_registry_errors() -> None:
    with pytest.raises(ir.ConfigError, match="pass 'InferType' is already registered"):
        pm.register_pass(pm.passes.InferType)
    with pytest.raises(
        ir.ConfigError, match=r"unknown pass 'InferTyp' \(did you mean 'InferType'\?\)"
    ):
        pm.get_pass("InferTyp")
    with pytest.raises(TypeError, match="takes a Pass class or instance"):
        pm.register_pass(lambda mod: mod)
    assert {"InferType", "DeadCodeElimination", "PrintIR"} <= set(pm.list_passes())


def test_a_users_python_pass_joins_an_existing_pipeline() -> None:
    @pm.function_pass(opt_level=2, name="ExpOfLogIsX", required=["InferType"])
    def exp_log(fn, mod, ctx):
        class R(ir.ExprMutator):
            def rewrite_call(self, pre, post):
                inner = post.args[0] if post.args else None
                if post.op.name == "exp" and isinstance(inner, ir.Call) and inner.op.name == "log":
                    pm.count("rewrites")
                    return inner.args[0]
                return post

        return R().visit(fn)

    standard = pm.parse_pipeline("InferType,DeadCodeElimination")
    pipeline = pm.Sequential([*standard.passes, exp_log])
    mod = ir.parse("def @main(%x: Tensor[(3,), float32]) { let %unused = sin(%x); exp(log(%x)) }")
    with pm.PassContext(opt_level=2) as ctx:
        out = pipeline(mod)
    assert str(out["main"].body) == "%x"
    assert ctx.run.counters["ExpOfLogIsX"]["rewrites"] == 1
    assert ctx.run.history == ["InferType", "DeadCodeElimination", "InferType", "ExpOfLogIsX"]


def test_bisection_finds_a_deliberately_broken_pass_in_a_pipeline_of_ten() -> None:
    @pm.function_pass(opt_level=0, name="Saboteur")
    def saboteur(fn, mod, ctx):
        return ir.Function(fn.params, op.multiply(fn.body, ir.const(np.float32(2))))

    passes = [Rename(f"p{i}") for i in range(10)]
    passes[6] = saboteur
    pipeline = pm.Sequential([pm.passes.InferType(), *passes])
    mod = small_module()
    x = np.ones((2, 3), "float32")
    expected = ir.interpret(mod, x)

    def is_good(m: ir.IRModule) -> bool:
        return bool(np.allclose(ir.interpret(m, x), expected))

    result = pm.bisect_pipeline(pipeline, mod, is_good)
    assert (result.culprit, result.index) == ("Saboteur", 7)
    assert result.runs <= 6  # one full run plus ~log2(10) probes
    with pm.PassContext(config={"pass.bisect_limit": 3}) as ctx:
        out = pipeline(mod)
    assert ran(out) == ["p0", "p1", "p2"]
    assert ctx.run.history[0] == "InferType"  # always-run passes are not counted
    assert pm.bisect_pipeline(pm.Sequential(passes[:6]), mod, is_good).culprit is None
