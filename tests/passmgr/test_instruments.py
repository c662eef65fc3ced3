"""Instrument call order and exception rules (seed 000), and the stock instruments."""

from __future__ import annotations

import io

import pytest

import egraph_ir as ir
import passmgr as pm
from egraph_ir import op

from .helpers import Rename, negate_to_multiply, small_module

HOOKS = ["enter_pass_ctx", "exit_pass_ctx", "should_run", "run_before_pass", "run_after_pass"]


class Recorder(pm.PassInstrument):
    def __init__(self, name: str, log: list[str], fail: str | None = None, veto: str = "") -> None:
        self.name, self.log, self.fail, self.veto = name, log, fail, veto

    def _hook(self, hook: str, detail: str = "") -> None:
        self.log.append(f"{self.name}.{hook}{detail}")
        if self.fail == hook:
            raise RuntimeError(f"{self.name} fails in {hook}")

    def enter_pass_ctx(self) -> None:
        self._hook("enter_pass_ctx")

    def exit_pass_ctx(self) -> None:
        self._hook("exit_pass_ctx")

    def should_run(self, mod, info) -> bool:
        self._hook("should_run", f"({info.name})")
        return info.name != self.veto

    def run_before_pass(self, mod, info) -> None:
        self._hook("run_before_pass", f"({info.name})")

    def run_after_pass(self, mod, info) -> None:
        self._hook("run_after_pass", f"({info.name})")


def test_call_order_over_the_instrument_list() -> None:
    log: list[str] = []
    with pm.PassContext(instruments=[Recorder("A", log), Recorder("B", log)]):
        Rename("p")(small_module())
    assert log == [
        "A.enter_pass_ctx",
        "B.enter_pass_ctx",
        "A.should_run(p)",
        "B.should_run(p)",
        "A.run_before_pass(p)",
        "B.run_before_pass(p)",
        "A.run_after_pass(p)",
        "B.run_after_pass(p)",
        "A.exit_pass_ctx",
        "B.exit_pass_ctx",
    ]


def test_should_run_can_veto_and_then_no_before_or_after_runs() -> None:
    log: list[str] = []
    with pm.PassContext(instruments=[Recorder("A", log, veto="p"), Recorder("B", log)]):
        out = pm.Sequential([Rename("p"), Rename("q")])(small_module())
    assert "A.run_before_pass(p)" not in log and "A.run_after_pass(p)" not in log
    assert "B.should_run(p)" in log  # every instrument is asked
    assert "A.run_after_pass(q)" in log
    assert [n for n in out if n.startswith("ran_")] == ["ran_1_q"]


def test_required_passes_skip_should_run() -> None:
    log: list[str] = []
    p = Rename("p")
    with pm.PassContext(required_pass=["p"], instruments=[Recorder("A", log, veto="p")]):
        p(small_module())
    assert "A.should_run(p)" not in log and "A.run_before_pass(p)" in log


@pytest.mark.parametrize("position", [0, 1, 2])
def test_exception_in_enter_exits_the_entered_ones_and_clears(position: int) -> None:
    log: list[str] = []
    insts = [
        Recorder(n, log, fail="enter_pass_ctx" if i == position else None)
        for i, n in enumerate("ABC")
    ]
    ctx = pm.PassContext(instruments=insts)
    with pytest.raises(RuntimeError, match="fails in enter_pass_ctx"), ctx:
        pass
    entered = "ABC"[:position]
    assert log == [f"{n}.enter_pass_ctx" for n in "ABC"[: position + 1]] + [
        f"{n}.exit_pass_ctx" for n in entered
    ]
    assert ctx.instruments == []
    assert pm.PassContext.current() is not ctx


@pytest.mark.parametrize("position", [0, 1, 2])
def test_exception_in_exit_clears_and_skips_the_rest(position: int) -> None:
    log: list[str] = []
    insts = [
        Recorder(n, log, fail="exit_pass_ctx" if i == position else None)
        for i, n in enumerate("ABC")
    ]
    ctx = pm.PassContext(instruments=insts)
    with pytest.raises(RuntimeError, match="fails in exit_pass_ctx"), ctx:
        pass
    exits = [entry for entry in log if entry.endswith("exit_pass_ctx")]
    assert exits == [f"{n}.exit_pass_ctx" for n in "ABC"[: position + 1]]
    assert ctx.instruments == []
    assert pm.PassContext.current() is not ctx


@pytest.mark.parametrize("hook", ["should_run", "run_before_pass", "run_after_pass"])
@pytest.mark.parametrize("position", [0, 1])
def test_exceptions_in_pass_hooks_propagate_and_the_context_still_exits(hook, position) -> None:
    log: list[str] = []
    insts = [Recorder(n, log, fail=hook if i == position else None) for i, n in enumerate("AB")]
    with pytest.raises(RuntimeError, match=f"fails in {hook}"), pm.PassContext(instruments=insts):
        Rename("p")(small_module())
    assert log[-2:] == ["A.exit_pass_ctx", "B.exit_pass_ctx"]
    assert f"{'AB'[position]}.{hook}(p)" in log


def test_run_after_pass_only_for_passes_that_ran() -> None:
    log: list[str] = []
    with pm.PassContext(opt_level=1, instruments=[Recorder("A", log)]):
        pm.Sequential([Rename("on", 1), Rename("off", 3)])(small_module())
    assert "A.run_after_pass(on)" in log
    assert not any("(off)" in entry for entry in log)


def test_override_instruments_exits_old_and_enters_new() -> None:
    log: list[str] = []
    with pm.PassContext(instruments=[Recorder("old", log)]):
        pm.override_instruments([Recorder("new", log)])
        Rename("p")(small_module())
    assert log[:3] == ["old.enter_pass_ctx", "old.exit_pass_ctx", "new.enter_pass_ctx"]
    assert log[-1] == "new.exit_pass_ctx"


def test_pass_instrument_decorator() -> None:
    @pm.pass_instrument
    class Count:
        def __init__(self) -> None:
            self.n = 0

        def run_after_pass(self, mod, info) -> None:
            self.n += 1

    counter = Count()
    assert isinstance(counter, pm.PassInstrument)
    with pm.PassContext(instruments=[counter]):
        pm.Sequential([Rename("a"), Rename("b")])(small_module())
    assert counter.n == 3  # two passes and the Sequential
    with pytest.raises(TypeError, match="defines none of"):
        pm.pass_instrument(type("Empty", (), {}))


def test_timing_is_a_tree_for_nested_sequentials() -> None:
    timing = pm.PassTimingInstrument()
    inner = pm.Sequential([Rename("b"), Rename("c")], name="inner")
    with pm.PassContext(instruments=[timing]):
        pm.Sequential([Rename("a"), inner], name="outer")(small_module())
    tree = timing.to_dict()
    outer = tree["children"][0]
    assert outer["name"] == "outer"
    assert [c["name"] for c in outer["children"]] == ["a", "inner"]
    assert [c["name"] for c in outer["children"][1]["children"]] == ["b", "c"]
    text = timing.render()
    assert "  outer:" in text and "      b:" in text and text.count("ms") == 6


def test_print_ir_before_after_and_on_change() -> None:
    buf = io.StringIO()

    @pm.function_pass(opt_level=0, name="NegToMul")
    def neg_to_mul(fn, mod, ctx):
        return negate_to_multiply(fn)

    mod = ir.parse("def @main(%x: Tensor[(2,), float32]) { negative(exp(%x)) }")
    insts = [
        pm.PrintIRBefore(passes=["NegToMul"], out=buf),
        pm.PrintIRAfter(out=buf),
        pm.PrintIRAfterChange(out=buf),
    ]
    with pm.PassContext(instruments=insts):
        pm.Sequential([pm.passes.InferType(), neg_to_mul])(mod)
    text = buf.getvalue()
    assert text.count("// IR before") == 1 and "// IR before NegToMul" in text
    assert "// IR after InferType" in text and "// IR after NegToMul" in text
    assert "-  negative(%0)" in text and "+  multiply(%0, -1.0f)" in text
    # InferType changed nothing: diffs only after NegToMul and the Sequential around it
    assert text.count("--- before") == 2 and "--- before InferType" not in text


def test_verify_each_names_the_pass_that_broke_the_ir() -> None:
    # a module pass: a function pass's result is re-typed, which already names the pass
    @pm.module_pass(opt_level=0, name="Breaker")
    def breaker(mod, ctx):
        fn = mod["main"]
        return mod.with_function(
            "main", ir.Function(fn.params, op.add(fn.body, ir.var("ghost", shape=(9,))))
        )

    with (
        pytest.raises(
            ir.PassError, match=r"ill-formed after pass 'Breaker'.*unbound variable\(s\) %ghost"
        ),
        pm.PassContext(instruments=[pm.VerifyEach()]),
    ):
        pm.Sequential([Rename("ok"), breaker])(small_module())

    @pm.module_pass(opt_level=0, name="BadShape")
    def bad_shape(mod, ctx):
        fn = mod["main"]
        return mod.with_function(
            "main", ir.Function(fn.params, op.add(fn.body, ir.const([1.0, 2.0])))
        )

    with (
        pytest.raises(ir.PassError, match=r"ill-formed after pass 'BadShape'.*cannot broadcast"),
        pm.PassContext(instruments=[pm.VerifyEach()]),
    ):
        bad_shape(small_module())


def test_timing_closes_a_failed_pass_and_later_pipelines_are_not_nested_under_it() -> None:
    @pm.function_pass(opt_level=0, name="Boom")
    def boom(fn, mod, ctx):
        raise RuntimeError("boom")

    timing = pm.PassTimingInstrument()
    with pm.PassContext(instruments=[timing]):
        with pytest.raises(ir.CompilerError):
            pm.Sequential([pm.passes.InferType(), boom])(small_module())
        pm.Sequential([pm.passes.InferType()])(small_module())
    first, second = timing.root.children
    assert first.name == "Sequential (failed)" and first.children[-1].name == "Boom (failed)"
    assert not first.children[-1].children and second.name == "Sequential"
