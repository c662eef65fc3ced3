"""passmgr.testing: every registered pass is checked on random programs; broken passes and
backends are caught with a counterexample."""

from __future__ import annotations

import numpy as np
import pytest

import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from passmgr.testing import check_differential, check_pass


@pytest.mark.parametrize("name", pm.list_passes())
def test_every_registered_pass_preserves_semantics(name: str, capsys) -> None:
    report = check_pass(pm.get_pass(name))
    assert report.ok, str(report)
    assert report.examples > 0


class _SwapAddForSubtract(ir.ExprMutator):
    def rewrite_call(self, pre, post):
        if isinstance(post.op, ir.Op) and post.op.name in ("add", "multiply"):
            return op.subtract(*post.args)
        return post


@pm.function_pass(opt_level=0, name="BrokenSwap")
def broken_swap(fn, mod, ctx):
    return _SwapAddForSubtract().visit(fn)


@pm.function_pass(opt_level=0, name="AddOneEachTime")
def add_one(fn, mod, ctx):
    """Adds -0.0: every value keeps its value and its sign (x + -0.0 == x, -0.0 too)."""
    return ir.Function(fn.params, op.add(fn.body, ir.const(np.float32(-0.0))), fn.ret_type)


@pm.function_pass(opt_level=0, name="AddPositiveZero")
def add_positive_zero(fn, mod, ctx):
    """Adds +0.0, which turns a -0.0 result into +0.0 (numpy's semantics tell them apart)."""
    return ir.Function(fn.params, op.add(fn.body, ir.const(np.float32(0.0))), fn.ret_type)


def test_a_pass_that_changes_results_is_caught_with_a_program() -> None:
    report = check_pass(broken_swap)
    assert not report.ok
    assert "outputs changed" in report.failure and "def @main" in report.failure


def test_a_pass_declared_idempotent_is_checked_for_it() -> None:
    assert check_pass(add_one, idempotent=False).ok  # adding zero keeps the values
    report = check_pass(add_one, idempotent=True)
    assert not report.ok and "not idempotent" in report.failure


def test_a_pass_that_flips_the_sign_of_a_zero_is_caught() -> None:
    report = check_pass(add_positive_zero, idempotent=False, max_examples=200)
    assert not report.ok and "a zero changed sign" in report.failure


def test_differential_harness_accepts_a_faithful_backend_and_catches_a_wrong_one() -> None:
    def faithful(mod):
        return lambda **inputs: ir.interpret(mod, **inputs)

    def off_by_one(mod):
        return lambda **inputs: np.asarray(ir.interpret(mod, **inputs)) + 1

    assert check_differential(faithful, max_examples=10).ok
    report = check_differential(off_by_one, max_examples=10, name="off-by-one")
    assert not report.ok and "differ from the interpreter" in str(report)
