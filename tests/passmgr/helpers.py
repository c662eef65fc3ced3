"""Small passes and modules shared by the pass-manager tests."""

from __future__ import annotations

import numpy as np

import egraph_ir as ir
import passmgr as pm
from egraph_ir import op


def small_module() -> ir.IRModule:
    return ir.parse("def @main(%x: Tensor[(2, 3), float32]) { add(relu(%x), 1f) }")


class Rename(pm.ModulePass):
    """Adds a function; used to see that passes ran and in which order."""

    def __init__(self, tag: str, opt_level: int = 0, required: tuple[str, ...] = ()) -> None:
        self.tag = tag
        self._info = pm.PassInfo(tag, opt_level, required)  # makes the name known

    @property
    def info(self) -> pm.PassInfo:
        return self._info

    def transform_module(self, mod: ir.IRModule, ctx: pm.PassContext) -> ir.IRModule:
        x = ir.var("x", shape=(1,))
        return mod.with_function(f"ran_{len(mod)}_{self.tag}", ir.Function([x], x))


def ran(mod: ir.IRModule) -> list[str]:
    """The tags of Rename passes that ran, in order."""
    names = sorted((n for n in mod if n.startswith("ran_")), key=lambda n: int(n.split("_")[1]))
    return [n.split("_", 2)[2] for n in names]


def negate_to_multiply(fn: ir.Function) -> ir.Function:
    class M(ir.ExprMutator):
        def rewrite_call(self, pre, post):
            if post.op.name == "negative":
                return op.multiply(post.args[0], ir.const(np.float32(-1)))
            return post

    out = M().visit(fn)
    assert isinstance(out, ir.Function)
    return out
