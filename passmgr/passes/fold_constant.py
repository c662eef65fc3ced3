"""FoldConstant: evaluate calls whose inputs are all constants, with the numpy references.

Done on the IR directly (not in the e-graph) so large weights fold without being copied into
egglog; shared sub-expressions are evaluated once. Results above max_bytes stay unfolded.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_ir.expr import Call, Expr, Function, TupleGetItem
from egraph_ir.fold import as_constant, constant_value, fold
from egraph_ir.module import IRModule
from egraph_ir.visitor import ExprMutator

from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass

DEFAULT_MAX_BYTES = 64 << 20


class _Folder(ExprMutator):
    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.folded = 0

    def rewrite_call(self, pre: Call, post: Call) -> Expr:  # type: ignore[override]
        value = constant_value(post)
        if value is None:
            return post
        values = value if isinstance(value, tuple) else (value,)
        if sum(v.nbytes for v in values) > self.max_bytes:
            return post
        self.folded += 1
        return as_constant(value)

    def rewrite_tuple_getitem(self, pre: TupleGetItem, post: TupleGetItem) -> Expr:  # type: ignore[override]
        return fold(post)


def fold_constants(fn: Function, max_bytes: int = DEFAULT_MAX_BYTES) -> Function:
    folder = _Folder(max_bytes)
    out = folder.visit(fn)
    assert isinstance(out, Function)
    return out


@register_pass
@dataclass(frozen=True)
class FoldConstant(FunctionPass):
    """Replace all-constant computations by their values (up to max_bytes per result)."""

    idempotent = True

    max_bytes: int = DEFAULT_MAX_BYTES
    opt_level = 2

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        folder = _Folder(self.max_bytes)
        out = folder.visit(fn)
        assert isinstance(out, Function)
        if folder.folded:
            ctx.bump("calls folded", folder.folded)
        return out
