"""Property checks for passes and backends, on random well-typed programs (hypothesis).

`check_pass(pass_)`: every random program must compute the same before and after the pass
(reference interpreter, dtype-aware tolerance), the result must type-check, and a pass that
declares itself idempotent (class attribute `idempotent = True`) must change nothing on a
second run. `check_differential(build)`: a backend's compiled code must agree with the
interpreter — codegen plugs its `build` in here. Both return a report with the shrunk
counterexample instead of raising, so tools and tests can print it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from egraph_ir.compare import mismatch
from egraph_ir.errors import CompilerError
from egraph_ir.infer import infer_type
from egraph_ir.interp import interpret
from egraph_ir.module import IRModule
from egraph_ir.structural import structural_equal
from egraph_ir.testing import ProgramCase, assert_allclose, programs

from .context import PassContext
from .pass_base import Pass
from .sequential import Sequential

Backend = Callable[[IRModule], Callable[..., Any]]


@dataclass
class CheckReport:
    """What a property check found: how many programs ran and the first (shrunk) failure."""

    subject: str
    examples: int = 0
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        if self.ok:
            return f"{self.subject}: ok on {self.examples} random program(s)"
        return f"{self.subject}: FAILED\n{self.failure}"


class _Broken(Exception):
    pass


def _settings(max_examples: int | None) -> settings:
    return settings(
        max_examples=max_examples or settings().max_examples,
        deadline=None,
        database=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )


def _explain(case: ProgramCase, what: str) -> str:
    return f"{what}\non the program\n{case!r}"


def check_pass(
    pass_: Pass,
    max_examples: int | None = None,
    seed: int = 0,
    idempotent: bool | None = None,
    opt_level: int = 3,
    max_nodes: int = 10,
) -> CheckReport:
    """Check that `pass_` preserves semantics and types on random programs. Zeros keep
    their sign (numpy's semantics, which 1/x tells apart) unless the pass declares
    `fast_math = True` (exact for finite values only, like the rules it runs)."""
    name = pass_.info.name
    signed_zeros = getattr(pass_, "fast_math", None) is not True
    report = CheckReport(f"pass {name}")
    check_twice = getattr(pass_, "idempotent", False) if idempotent is None else idempotent
    pipeline = Sequential([pass_], name=f"check {name}")  # runs the pass's required ones

    @hypothesis_seed(seed)
    @_settings(max_examples)
    @given(programs(max_nodes=max_nodes))
    def prop(case: ProgramCase) -> None:
        report.examples += 1
        with PassContext(opt_level=opt_level, required_pass=[name]):
            try:
                out = pipeline(case.mod)
                infer_type(out)
            except CompilerError as exc:
                raise _Broken(_explain(case, f"the pass failed or broke typing: {exc}")) from exc
            after, before = interpret(out, **case.inputs), interpret(case.mod, **case.inputs)
            try:
                assert_allclose(after, before)
            except AssertionError as exc:
                raise _Broken(_explain(case, f"outputs changed: {exc}\nafter:\n{out}")) from exc
            sign = mismatch(after, before, signed_zeros=True) if signed_zeros else None
            if sign:
                raise _Broken(_explain(case, f"a zero changed sign: {sign}\nafter:\n{out}"))
            if check_twice:
                again = pipeline(out)
                if not structural_equal(again, out):
                    raise _Broken(_explain(case, f"not idempotent: second run gave\n{again}"))

    try:
        prop()
    except _Broken as exc:
        report.failure = str(exc)
    return report


def check_differential(
    build: Backend,
    max_examples: int | None = None,
    seed: int = 0,
    max_nodes: int = 10,
    name: str = "backend",
) -> CheckReport:
    """Compiled code against the interpreter: `build(mod)` returns a callable taking the
    inputs as keyword arguments and returning the outputs."""
    report = CheckReport(name)

    @hypothesis_seed(seed)
    @_settings(max_examples)
    @given(programs(max_nodes=max_nodes))
    def prop(case: ProgramCase) -> None:
        report.examples += 1
        expected = interpret(case.mod, **case.inputs)
        try:
            actual = build(case.mod)(**case.inputs)
        except Exception as exc:
            raise _Broken(_explain(case, f"build or run failed: {exc!r}")) from exc
        try:
            assert_allclose(_as_numpy(actual), expected)
        except AssertionError as exc:
            raise _Broken(_explain(case, f"outputs differ from the interpreter: {exc}")) from exc

    try:
        prop()
    except _Broken as exc:
        report.failure = str(exc)
    return report


def _as_numpy(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return tuple(_as_numpy(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(_as_numpy(v) for v in value.values())
    return np.asarray(value)
