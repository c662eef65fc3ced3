"""Which layout each tensor of a dataflow function is in, as the extraction left it: what
`egc compile --report` and a profile show beside each kernel.

Tensors enter NCHW (ONNX's convention for 4-D data); `conv2d_nchwc` and
`layout_transform` write the layout their attribute names; every other op keeps the
layout of its first operand of the same rank (an elementwise op on NCHW16c data is
NCHW16c). A tensor of another rank, or made from no laid-out operand, has none ("").
"""

from __future__ import annotations

from collections.abc import Sequence

from .expr import Call, Expr, Function, Var
from .registry import Op
from .types import TensorType
from .visitor import post_order

WRITTEN_LAYOUT = {
    "conv2d_nchwc": "out_layout",
    "qnn_conv2d_nchwc": "out_layout",
    "conv2d_winograd": "out_layout",
    "layout_transform": "dst_layout",
}


def _rank(e: Expr) -> int:
    t = e.checked_type
    return len(t.shape) if isinstance(t, TensorType) else -1


def tensor_layouts(fn: Function, param_layouts: Sequence[str] | None = None) -> dict[Expr, str]:
    """The layout of each tensor in `fn`'s body (no entry: none known). `param_layouts`
    gives the parameters' (default: NCHW for 4-D ones)."""
    layouts: dict[Expr, str] = {}
    given = list(param_layouts) if param_layouts is not None else [None] * len(fn.params)
    for p, layout in zip(fn.params, given, strict=True):
        if layout is None:
            layout = "NCHW" if _rank(p) == 4 else ""
        if layout:
            layouts[p] = layout
    for e in post_order(fn.body, into_functions=False):
        if e in layouts or isinstance(e, Var) or not isinstance(e, Call):
            continue
        if isinstance(e.op, Op) and e.op.name in WRITTEN_LAYOUT:
            layouts[e] = str(e.attrs[WRITTEN_LAYOUT[e.op.name]])
            continue
        if isinstance(e.op, Function):  # a fused group inside a main function
            inner = result_layout(e.op, [layouts.get(a, "") for a in e.args])
            if inner:
                layouts[e] = inner
            continue
        rank = _rank(e)
        found = next((layouts[a] for a in e.args if a in layouts and _rank(a) == rank), "")
        if found:
            layouts[e] = found
    return layouts


def result_layout(fn: Function, param_layouts: Sequence[str]) -> str:
    """The layout of `fn`'s result given its parameters' ("" when none)."""
    return tensor_layouts(fn, param_layouts).get(fn.body, "")
