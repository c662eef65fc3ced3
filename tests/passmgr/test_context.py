"""PassContext: with-blocks, nesting, threads, config options and enabling rules."""

from __future__ import annotations

import threading

import pytest

import egraph_ir as ir
import passmgr as pm

from .helpers import Rename, ran, small_module


def test_current_context_follows_nested_with_blocks() -> None:
    default = pm.PassContext.current()
    with pm.PassContext(opt_level=3) as outer:
        assert pm.PassContext.current() is outer
        with pm.PassContext(opt_level=1) as inner:
            assert pm.PassContext.current() is inner
        assert pm.PassContext.current() is outer
    assert pm.PassContext.current() is default


def test_a_context_entered_in_one_thread_is_not_current_in_another() -> None:
    seen = {}

    def other() -> None:
        seen["ctx"] = pm.PassContext.current()

    with pm.PassContext(opt_level=4) as ctx:
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["ctx"] is not ctx
    assert seen["ctx"].opt_level == 2


def test_config_options_are_typed_and_known() -> None:
    pm.register_config("test.ctx.limit", int, 10, "a test option")
    with pm.PassContext(config={"test.ctx.limit": 3}) as ctx:
        assert ctx.get_config("test.ctx.limit") == 3
    assert pm.PassContext().get_config("test.ctx.limit") == 10
    with pytest.raises(
        ir.ConfigError,
        match=r"unknown config key 'test.ctx.limt' \(did you mean 'test.ctx.limit'\?\); known: .*pass.bisect_limit",
    ):
        pm.PassContext(config={"test.ctx.limt": 1})
    with pytest.raises(ir.ConfigError, match=r"'test.ctx.limit' expects int, got 'x'"):
        pm.PassContext(config={"test.ctx.limit": "x"})
    with pytest.raises(ir.ConfigError, match="expects int, got True"):
        pm.PassContext(config={"test.ctx.limit": True})
    with pytest.raises(ir.ConfigError, match="already registered"):
        pm.register_config("test.ctx.limit", int, 1)
    assert "test.ctx.limit" in pm.list_configs()


def test_bad_context_arguments() -> None:
    with pytest.raises(ir.ConfigError, match="opt_level"):
        pm.PassContext(opt_level=7)
    with pytest.raises(ir.ConfigError, match="list of pass names"):
        pm.PassContext(disabled_pass="FuseOps")


def test_disabled_beats_required_beats_opt_level() -> None:
    seq = pm.Sequential([Rename("low", 1), Rename("high", 3), Rename("both", 3)])
    with pm.PassContext(opt_level=2, required_pass=["high", "both"], disabled_pass=["both"]):
        assert ran(seq(small_module())) == ["low", "high"]
    with pm.PassContext(opt_level=0):
        assert ran(seq(small_module())) == []
    with pm.PassContext(opt_level=3):
        assert ran(seq(small_module())) == ["low", "high", "both"]


def test_a_disabled_pass_never_runs_even_when_called_directly() -> None:
    solo = Rename("solo")
    with pm.PassContext(disabled_pass=["solo"]):
        assert ran(solo(small_module())) == []
    assert ran(Rename("solo", opt_level=4)(small_module())) == ["solo"]  # direct call: TVM rule


def test_required_passes_are_resolved_by_name_and_run_first() -> None:
    if "ReqHelper" not in pm.list_passes():
        pm.register_pass(Rename("ReqHelper"))
    seq = pm.Sequential([Rename("main-pass", required=("ReqHelper",))])
    assert ran(seq(small_module())) == ["ReqHelper", "main-pass"]
    broken = pm.Sequential([Rename("x", required=("NoSuchPass",))])
    with pytest.raises(ir.ConfigError, match=r"unknown pass 'NoSuchPass'; known: .*InferType"):
        broken(small_module())


def test_counters_are_kept_per_pass_in_the_run() -> None:
    @pm.module_pass(opt_level=0, name="Counter")
    def counter(mod, ctx):
        pm.count("things seen", 3)
        pm.count("things seen")
        return mod

    with pm.PassContext() as ctx:
        counter(small_module())
    assert ctx.run.counters["Counter"]["things seen"] == 4
    assert "things seen" in ctx.run.render()


def test_unknown_pass_names_in_the_context_are_errors_with_a_hint() -> None:
    """required_pass cannot be honoured with a name no pass has: an error. disabled_pass is
    what TVM code fills with its own pass names (AlterOpLayout): accepted, as TVM accepts
    it, with a warning that still catches a typo."""
    with pytest.warns(
        pm.UnknownPassWarning,
        match=r"disabled_pass: unknown pass 'FoldScaleAxsi' \(did you mean 'FoldScaleAxis'\?\)",
    ):
        pm.PassContext(disabled_pass=["FoldScaleAxsi"])
    tvm_idiom = "'AlterOpLayout'; disabling it does nothing"
    with (
        pytest.warns(pm.UnknownPassWarning, match=tvm_idiom),
        pm.PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]),
    ):
        pm.passes.InferType()(small_module())
    with pytest.raises(ir.ConfigError, match=r"required_pass: unknown pass 'InferTyp'"):
        pm.PassContext(required_pass=["InferTyp"])
    pm.PassContext(disabled_pass=["FoldScaleAxis"], required_pass=["Rename"])  # known names


def test_derive_keeps_what_it_does_not_override_and_shares_the_run() -> None:
    with pm.PassContext(
        opt_level=3, disabled_pass=["FoldConstant"], config={"eqsat.iter_limit": 4}
    ) as outer:
        inner = outer.derive(config={"eqsat.node_limit": 7})
        assert (inner.opt_level, inner.disabled_pass) == (3, ("FoldConstant",))
        assert inner.config == {"eqsat.iter_limit": 4, "eqsat.node_limit": 7}
        assert outer.derive(opt_level=1).opt_level == 1 and outer.config == {"eqsat.iter_limit": 4}
        with inner:
            pm.passes.FoldConstant(max_bytes=1)(small_module())  # disabled: not run
            pm.passes.EliminateCommonSubexpr()(small_module())
        assert inner.run is outer.run  # nested blocks write into the outermost block's run
        assert [name for name, _ in outer.run.records] == ["EliminateCommonSubexpr"]
    with pytest.raises(ir.ConfigError, match=r"unknown field.*opt_levl"):
        pm.PassContext().derive(opt_levl=1)
