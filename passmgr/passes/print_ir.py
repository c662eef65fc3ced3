"""PrintIR: print the module where it sits in a pipeline (debugging aid)."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from egraph_ir.module import IRModule

from ..context import PassContext
from ..pass_base import ModulePass
from ..registry import register_pass


@register_pass
@dataclass(frozen=True)
class PrintIR(ModulePass):
    """Print the module (without large constants' values unless show_meta) to stdout."""

    header: str = ""
    show_meta: bool = False
    opt_level = 0
    always_run = True

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        if self.header:
            print(f"// {self.header}")
        print(mod.astext(show_meta=self.show_meta), file=sys.stdout)
        return mod
