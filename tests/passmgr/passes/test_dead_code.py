"""DeadCodeElimination: golden cases and soundness on random programs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import egraph_ir as ir
import passmgr as pm
from egraph_ir.testing import assert_same_outputs, assert_structural_equal, programs


def test_removes_unused_lets_in_cascade_and_unreachable_functions() -> None:
    mod = ir.parse("""
    def @unused(%a: float32) { %a }
    def @helper(%a: float32) { exp(%a) }
    def @main(%x: float32) {
      let %a = sin(%x);
      let %b = cos(%a);
      let %c = @helper(%x);
      add(%c, %x)
    }""")
    with pm.PassContext() as ctx:
        out = pm.passes.DeadCodeElimination()(mod)
    expected = ir.parse("""
    def @helper(%a: float32) { exp(%a) }
    def @main(%x: float32) { let %c = @helper(%x); add(%c, %x) }""")
    assert_structural_equal(out, expected)
    assert ctx.run.last("DeadCodeElimination") == pm.passes.DeadCodeReport(1, 2)


def test_leaves_a_clean_module_untouched() -> None:
    mod = ir.parse("def @main(%x: float32) { let %y = exp(%x); %y }")
    result = pm.passes.DeadCodeElimination().apply(mod)
    assert result.module is mod and not result.changed


@given(programs(), st.integers(0, 3))
def test_dead_code_elimination_is_sound(case, n_dead) -> None:
    fn = case.mod["main"]
    body = fn.body
    for i in range(n_dead):  # wrap the program in unused bindings of its own inputs
        body = ir.Let(ir.var(f"dead{i}"), ir.op.negative(fn.params[0]), body)
    mod = ir.IRModule({"main": ir.Function(fn.params, body)})
    out = pm.passes.DeadCodeElimination()(mod)
    assert "dead" not in str(out)
    assert_same_outputs(out, case.mod, case.inputs)
