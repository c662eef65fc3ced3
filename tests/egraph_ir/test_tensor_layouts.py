"""tensor_layouts: the layout each tensor is in after the layout choice (what reports
show): written by conversions and blocked convolutions, kept by the ops in between."""

from __future__ import annotations

import numpy as np

import egraph_ir as ir
from egraph_ir import op
from egraph_ir.tensor_layouts import result_layout, tensor_layouts
from egraph_ir.visitor import post_order


def test_layouts_follow_conversions_blocked_convolutions_and_elementwise_ops() -> None:
    x = ir.var("x", shape=(1, 32, 8, 8))
    w = ir.const(np.zeros((32, 1, 3, 3), "float32"))
    blocked = op.layout_transform(x, src_layout="NCHW", dst_layout="NCHW16c")
    conv = op.conv2d_nchwc(blocked, w, padding=(1, 1, 1, 1), groups=32)
    relu = op.relu(conv)
    back = op.conv2d_nchwc(relu, w, padding=(1, 1, 1, 1), groups=32, out_layout="NCHW")
    flat = op.reshape(back, newshape=(1, -1))
    fn = ir.infer_type(ir.IRModule.from_expr(ir.Function([x], flat)))["main"]
    layouts = tensor_layouts(fn)
    found = {e: layouts.get(e, "") for e in (fn.params[0], *_calls(fn))}
    assert list(found.values()) == ["NCHW", "NCHW16c", "NCHW16c", "NCHW16c", "NCHW", ""]
    assert result_layout(fn, ["NCHW"]) == ""


def test_a_groups_result_takes_its_arguments_layouts() -> None:
    """A fused group's parameters carry the layouts of what the caller passes."""
    p = ir.var("p", shape=(1, 2, 4, 4, 16))
    fn = ir.infer_type(ir.IRModule.from_expr(ir.Function([p], op.sigmoid(p))))["main"]
    assert result_layout(fn, ["NCHW16c"]) == "NCHW16c"
    assert result_layout(fn, [""]) == ""  # not known: not guessed
    assert tensor_layouts(fn) == {}  # a 5-D input has no default layout


def _calls(fn: ir.Function) -> list[ir.Expr]:
    return [e for e in post_order(fn.body) if isinstance(e, ir.Call)]
