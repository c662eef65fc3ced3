"""Groups that compute each item of a leading size apart from the others: a batch of
images through a convolution, a batch of rows through a dense layer. Such a group of a
symbolic program is lowered once for one item, with every choice static (a convolution's
kernel, a product's blocking, their scratch), and run once per item by the glue, which
reads the item count from the sizes and moves each buffer on by an item's bytes
(codegen/llvm/entries.py). So convolutions over a symbolic batch serve every size too.

`leading_size(group)` says whether a group is one: every tensor in it, its parameters,
result and every value between, leads with the same size and has no other; and every op
leaves that axis alone: elementwise and broadcast ops whose other operands broadcast over
it, ops over NCHW-style data (convolutions, pools, layout conversions, dense), ops along
other axes (softmax, reductions, concatenation, slicing), reshapes that keep it, and
transposes that keep it first. Any other op, or a size elsewhere, is not taken.
"""

from __future__ import annotations

from egraph_ir.dims import Dim, is_static
from egraph_ir.expr import Call, Constant, Expr, Function, Var
from egraph_ir.registry import Op, OpPattern
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order

# the data (argument 0) is NCHW-style, the batch first; the other arguments are weights
ITEM_DATA = {
    "conv2d", "conv2d_nchwc", "conv2d_winograd", "qnn_conv2d", "qnn_conv2d_nchwc", "max_pool2d",
    "avg_pool2d",
    "global_avg_pool2d", "dense", "qnn_dense", "layout_transform", "batch_flatten",
}  # fmt: skip
# ops along the axes their `axis` attribute names: taken where axis 0 is not one of them
ALONG_AXES = {
    "softmax", "log_softmax", "layer_norm", "argmax", "max", "mean", "min", "prod", "sum",
    "bias_add", "concatenate", "split", "cumsum", "cumprod", "gather_elements", "take",
    "expand_dims", "squeeze", "flatten", "instance_norm", "group_norm", "l2_normalize",
    "strided_slice", "topk",
}  # fmt: skip
KEEPS_LEADING = {"reshape", "dequantize", "quantize", "requantize", "cast"}


def leading_size(group: Function) -> Dim | None:
    """The size every tensor of `group` leads with, where the group computes each item
    of it apart from the others (see the module doc), else None."""
    types = [p.checked_type for p in group.params] + [group.body.checked_type]
    tensors = [t for t in types if isinstance(t, TensorType) and t.shape]
    if len(tensors) != len(types):
        return None
    lead = tensors[-1].shape[0]
    if not isinstance(lead, Dim) or not all(_item_type(t, lead) for t in tensors):
        return None
    for node in post_order(group.body):
        if isinstance(node, Call) and not _per_item(node, lead):
            return None
    return lead


def _item_type(t: TensorType, lead: Dim) -> bool:
    """Leads with `lead` and has no other size."""
    return bool(t.shape) and t.shape[0] == lead and is_static(t.shape[1:])


def _depends(e: Expr, lead: Dim) -> bool:
    """Does a value name the size (an item's data, not a weight)?"""
    t = e.checked_type
    return isinstance(t, TensorType) and not t.is_static


def _per_item(call: Call, lead: Dim) -> bool:
    """Does this op leave the leading axis alone?"""
    t = call.checked_type
    if not isinstance(call.op, Op) or not isinstance(t, TensorType):
        return False
    items = [a for a in call.args if _depends(a, lead)]
    if not items and t.is_static:
        return True  # computed from weights only: the same for every item
    if not _item_type(t, lead) or not all(_item_type(a.checked_type, lead) for a in items):  # type: ignore[arg-type]
        return False
    name, attrs = call.op.name, call.attrs
    if name in ITEM_DATA:
        layouts = [str(attrs[k]) for k in ("src_layout", "dst_layout") if k in attrs]
        data_first = all(layout.startswith("N") for layout in layouts)
        return data_first and items == [call.args[0]]
    if name in ALONG_AXES:
        return not _touches_axis_zero(call)
    if name == "transpose":
        axes = attrs["axes"]
        return axes is not None and int(axes[0]) == 0
    if name in ("matmul", "batch_matmul", "qnn_matmul"):
        return call.args[0] in items  # B per item too, or shared weights
    if name in KEEPS_LEADING or call.op.pattern <= OpPattern.BROADCAST:
        return all(_broadcasts_over_items(a, len(t.shape)) for a in call.args if a not in items)
    return False


def _touches_axis_zero(call: Call) -> bool:
    """Does the op's `axis`/`axes` attribute name axis 0 of its data (None: all axes)?"""
    attrs = call.attrs
    key = "axes" if call.op.name in ("strided_slice", "squeeze") else "axis"  # type: ignore[union-attr]
    value = attrs.get(key) if key in attrs else 1
    if value is None:
        return True
    data = call.args[0].checked_type
    rank = len(data.shape) if isinstance(data, TensorType) else 1
    if call.op.name == "expand_dims":  # type: ignore[union-attr]
        rank += 1  # its axis counts in the result
    axes = value if isinstance(value, tuple | list) else (value,)
    return any(int(a) % max(rank, 1) == 0 for a in axes)


def _broadcasts_over_items(arg: Expr, rank: int) -> bool:
    """A weight (a constant or a static value) that broadcasts over the leading axis:
    fewer axes than the result, or a leading 1."""
    t = arg.checked_type
    if not isinstance(t, TensorType) or not t.is_static:
        return False
    if isinstance(arg, Var | Constant | Call) and len(t.shape) < rank:
        return True
    return len(t.shape) == rank and t.shape[0] == 1


__all__ = ["leading_size"]
