"""The e-graph bridge: rewriting, guards, literals, folding, limits and refusals."""

from __future__ import annotations

import random

import numpy as np
import pytest

import egraph_ir as ir
import rules
from egraph_ir import op
from egraph_ir.egraph import Limits, Stop, optimize
from egraph_ir.testing import assert_structural_equal

AC = rules.parse("""
rule add-comm [t]
    add(?a, ?b) => add(?b, ?a)
rule mul-comm [t]
    multiply(?a, ?b) => multiply(?b, ?a)
rule add-assoc [t]
    add(add(?a, ?b), ?c) <=> add(?a, add(?b, ?c))
rule mul-assoc [t]
    multiply(multiply(?a, ?b), ?c) <=> multiply(?a, multiply(?b, ?c))
""")


def random_program(n: int, seed: int = 0) -> ir.Function:
    rng = random.Random(seed)
    xs = [ir.var(f"x{i}", shape=(4,)) for i in range(16)]
    vals: list[ir.Expr] = list(xs)
    for i in range(n):
        a, b = rng.choice(vals[-40:]), rng.choice(vals[-40:])
        vals.append(
            rng.choice([op.add, op.multiply, op.subtract])(a, b) if i % 5 else op.negative(a)
        )
    return ir.Function(xs, vals[-1])


def test_rewrites_guards_literals_and_folding() -> None:
    mod = ir.parse("""def @main(%x: Tensor[(2, 3), float32]) {
      %0 = negative(negative(%x));
      %1 = transpose(transpose(%0, axes=[1, 0]), axes=[1, 0]);
      %2 = multiply(%1, 1f);
      add(%2, multiply(2f, 3f))
    }""")
    rs = rules.builtin("algebraic") + rules.builtin("layout")
    result = optimize(mod["main"], rs.enabled(fast_math=False).rewrites())
    expected = ir.parse("def @main(%x: Tensor[(2, 3), float32]) { add(%x, 6f) }")
    assert_structural_equal(ir.IRModule({"main": result.function}), expected)
    rep = result.report
    assert rep.stop_reason.kind is Stop.SATURATED
    assert rep.applied["double-negative"] >= 1 and rep.applied["transpose-transpose"] >= 1
    assert rep.folded >= 1 and result.cost_after < result.cost_before


def test_a_literal_only_matches_an_all_equal_constant_of_a_fitting_shape() -> None:
    rs = rules.parse("rule mul-one [t]\n    multiply(?x, 1) => ?x")
    for const, removed in [("1f", True), ("[1f, 1f, 1f]", True), ("[1f, 2f, 1f]", False)]:
        fn = ir.parse(f"def @main(%x: Tensor[(3,), float32]) {{ multiply(%x, {const}) }}")["main"]
        out = optimize(fn, rs.rewrites(), fold_constants=False).function
        assert (out.body is out.params[0]) == removed, const
    # a literal that broadcasts to a bigger shape cannot replace the product by ?x
    fn = ir.parse(
        "def @main(%x: Tensor[(3,), float32]) { multiply(%x, [[1f, 1f, 1f], [1f, 1f, 1f]]) }"
    )["main"]
    result = optimize(fn, rs.rewrites(), fold_constants=False)
    assert isinstance(result.function.body, ir.Call)
    assert "mul-one" in result.report.unsound


def test_a_shape_changing_rule_is_refused_and_reported_with_its_location() -> None:
    rs = rules.parse("rule bad-transpose [t]\n    transpose(?x, axes=?p) => ?x\n", "mine.rules")
    fn = ir.parse("def @main(%x: Tensor[(2, 3), float32]) { transpose(%x, axes=[1, 0]) }")["main"]
    result = optimize(fn, rs.rewrites())
    assert result.report.unsound["bad-transpose"] == (
        "mine.rules:1:1: rule 'bad-transpose' would union Tensor[(3, 2), float32] with "
        "Tensor[(2, 3), float32]"
    )
    assert ir.structural_equal(result.function, fn)


def test_guards_that_fail_now_are_retried_when_constants_fold() -> None:
    rs = rules.parse("rule scale [t]\n    multiply(?x, ?k) => ?x\n    where value(?k) == 1.0")
    fn = ir.parse("def @main(%x: Tensor[(3,), float32]) { multiply(%x, subtract(3f, 2f)) }")["main"]
    result = optimize(fn, rs.rewrites())
    assert result.function.body is result.function.params[0]


@pytest.mark.slow
def test_node_limit_holds_on_a_1000_node_program_under_commutativity_and_associativity() -> None:
    fn = random_program(1000)
    result = optimize(fn, AC.rewrites(), Limits(nodes=10_000, seconds=120, iterations=50))
    rep = result.report
    assert rep.stop_reason.kind is Stop.NODE_LIMIT
    assert 10_000 <= rep.enodes_per_iteration[-1] <= 10_000 * 1.1
    x = {
        p.name_hint: np.random.default_rng(0).standard_normal(4).astype("float32")
        for p in fn.params
    }
    np.testing.assert_allclose(
        ir.interpret(result.function, **x), ir.interpret(fn, **x), rtol=1e-4, atol=1e-4
    )


class _Clock:
    """A clock that moves `step` seconds each time it is read: time limits are tested on
    what the code reads, never on the machine's speed (no wall-clock assertion)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_time_limit_is_kept_within_twenty_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    saturate_module = sys.modules["egraph_ir.egraph.saturate"]  # the package re-exports a function
    clock = _Clock(0.05)
    monkeypatch.setattr(saturate_module, "time", clock)
    result = optimize(
        random_program(300, seed=1),
        AC.rewrites(),
        Limits(nodes=10**7, seconds=1.5, iterations=10**6),
    )
    assert result.report.stop_reason.kind is Stop.TIME_LIMIT
    reads = round(clock.now / clock.step)  # the clock's reads, no seconds of the machine
    limit_reads = round(1.5 / clock.step)
    assert limit_reads <= reads <= limit_reads * 1.2  # stopped within 20% past the limit


def test_iteration_limit_and_back_off() -> None:
    result = optimize(
        random_program(200), AC.rewrites(), Limits(iterations=2, match_limit=50, ban_length=1)
    )
    assert result.report.stop_reason.kind is Stop.ITERATION_LIMIT
    assert result.report.iterations == 2
    assert sum(result.report.applied.values()) <= 2 * 50 * len(AC.rewrites()) + 100


def test_deep_chains_encode_saturate_and_extract_without_recursion() -> None:
    x = ir.var("x", shape=(2,))
    e: ir.Expr = x
    for _ in range(3000):
        e = op.negative(e)
    result = optimize(
        ir.Function([x], e), rules.builtin("algebraic").rewrites(), Limits(iterations=3)
    )
    body = result.function.body
    assert body is result.function.params[0] or str(body).count("negative") < 3000


def test_expensive_rules_run_only_in_a_bounded_explore_phase() -> None:
    rs = rules.parse("""
rule double-negative [t]
    negative(negative(?x)) => ?x
rule add-comm [t, expensive]
    add(?a, ?b) => add(?b, ?a)
rule add-assoc [t, expensive]
    add(add(?a, ?b), ?c) <=> add(?a, add(?b, ?c))
""")
    fn = random_program(60, seed=3)
    result = optimize(fn, rs.rewrites(), Limits(explore_iterations=2))
    names = [name for name, *_ in result.report.phases]
    assert names == ["simplify", "explore", "simplify"]
    explore = result.report.phases[1]
    assert explore[1] <= 2
    x = ir.var("x", shape=(4,))
    assert_structural_equal(
        optimize(ir.Function([x], op.negative(op.negative(x))), rs.rewrites()).function.body, x
    )


@pytest.mark.parametrize("error", [MemoryError, RecursionError, SystemExit])
def test_a_guard_that_breaks_the_machine_is_not_read_as_false(error: type) -> None:
    from egraph_ir.egraph import PCall, PVar, Rewrite

    def guard(m):
        raise error("boom")

    rw = Rewrite("neg-neg", PCall("negative", (PCall("negative", (PVar("x"),)),)), PVar("x"), guard)
    x = ir.var("x", shape=(3,))
    fn = ir.Function([x], op.negative(op.negative(x)))
    expected = SystemExit if error is SystemExit else ir.CompilerError
    with pytest.raises(expected):
        optimize(fn, [rw])


def test_the_ilp_keeps_to_the_extraction_time_limit_on_a_large_egraph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building the model counts against the limit: with a clock that has run out while
    the rows are made, the ILP returns its warm start, labelled a time-out."""
    from egraph_ir.egraph import ilp

    fn = random_program(1000)
    limits = Limits(nodes=10_000, seconds=60, iterations=50)
    monkeypatch.setattr(ilp, "time", _Clock(1.0))  # past the deadline at its first check
    result = optimize(fn, AC.rewrites(), limits, extractor="ilp", extract_time_limit=0.3)
    assert result.extraction is not None
    assert result.extraction.status in ("time-out", "heuristic")
    assert result.cost_after <= result.cost_before  # never worse than the input
