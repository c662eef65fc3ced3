"""What a failing property test shows: the program itself, not `IRModule(@main)`."""

from __future__ import annotations

from hypothesis import given
from hypothesis.vendor.pretty import pretty

import egraph_ir as ir
from egraph_ir import models
from egraph_ir.testing import ProgramCase, programs


@given(programs(max_nodes=4))
def test_program_cases_print_their_program_for_hypothesis(case: ProgramCase) -> None:
    shown = pretty(case)
    assert shown.startswith("ProgramCase(inputs=") and "def @main(" in shown


def test_module_repr_is_the_program() -> None:
    text = repr(models.mlp())
    assert text.startswith("IRModule:\n") and "def @main(%x" in text
    assert pretty(models.mlp()) == text
    chain = ir.var("x", shape=(2,))
    body = chain
    for _ in range(300):
        body = ir.op.exp(body)
    long = repr(ir.IRModule.from_expr(ir.Function([chain], body)))
    assert long.endswith("more lines)") and long.count("\n") == 201
