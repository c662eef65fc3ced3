"""BlockLayout: channel-blocked layouts where they pay, chosen by extraction over the whole
function (TVM's AlterOpLayout as equality saturation; rules/builtin/blocked.rules).

Every convolution a blocked kernel computes gets its NCHW16c form in the e-graph, the
conversions sink through the elementwise ops after it and cancel in pairs; the `kernels`
cost model (egraph_ir/egraph/kernel_cost.py) prices each kernel at its measured rate and
each remaining conversion at the bytes it moves, so a chain of blocked convolutions
converts once at its ends, and a lone convolution stays NCHW when converting costs more
than the faster kernel saves. Constant conversions (a blocked bias) fold afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from egraph_ir.expr import Call, Function, op_name
from egraph_ir.module import IRModule
from egraph_ir.visitor import post_order
from rules import RuleSet

from ..config import register_config
from ..context import PassContext
from ..registry import register_pass
from .eqsat import EqSat
from .fold_constant import fold_constants

register_config(
    "layout.blocked",
    bool,
    True,
    "let BlockLayout choose channel-blocked layouts (NCHW16c) where the kernels cost says so",
)


@register_pass
@dataclass(frozen=True)
class BlockLayout(EqSat):
    """Channel-blocked layouts where the measured kernel costs favour them."""

    rules: str | RuleSet = "blocked+kernels+layout"
    fast_math: bool | None = True  # a mean over blocked data sums in another order
    cost_model: str = "kernels"
    # the blocked chains only pay together, which per-class greedy choices miss: exact
    # solves around greedy-dag's answer and the ILP; past 0.3 s they found no better choice
    # on MobileNetV2 and EfficientNet-B0 (3 s: 4% lower estimate on EfficientNet)
    extractor: str = "auto"
    extract_time_limit_s: float | None = 0.3
    opt_level = 3

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        if not ctx.get_config("layout.blocked"):
            return fn
        # without a convolution nothing is blocked, and the other rules' choices (one
        # layer norm kernel, a transpose folded) are local: greedy-dag makes the same ones
        # (checked on BERT, GPT-2 and the LSTM, float and int8) in a third of the time
        chosen = self if _has_convolution(fn) else replace(self, extractor="greedy-dag")
        return fold_constants(EqSat.transform_function(chosen, fn, mod, ctx))


def _has_convolution(fn: Function) -> bool:
    """A float or int8 convolution: what blocked forms exist for."""
    return any(
        isinstance(e, Call) and op_name(e) in ("conv2d", "qnn_conv2d") for e in post_order(fn)
    )
