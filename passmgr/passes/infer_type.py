"""InferType: record the type of every node (an analysis; the module is unchanged)."""

from __future__ import annotations

from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule

from ..context import PassContext
from ..pass_base import ModulePass
from ..registry import register_pass


@register_pass
class InferType(ModulePass):
    """Type-check the whole module; later passes read `checked_type`."""

    idempotent = True

    opt_level = 0
    always_run = True

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return infer_type(mod)
