"""OnnxRuntimeSums: integer convolutions and products of uint8 data by int8 weights summed
as ONNX Runtime's kernels on this CPU sum them, so a quantised model gives its bits.

With VNNI (AVX-512 VNNI, AVX-VNNI) ONNX Runtime's uint8 x int8 sums are exact; without,
its x86 kernels (vpmaddubsw) add the byte products of consecutive k in pairs saturated to
int16, and a model's outputs differ from the exact sums' (ResNet-18 quantised with uint8
activations: 713 of 1,000 outputs on an AVX2 host). The pass marks such calls `pairs=
"saturating"` (egraph_ir/op/qnn.py: the op's reference computes it) where the integer
kernels compute them so (codegen's vpmaddubsw path): one-group convolutions of an even
channel count whose sums a requantize reads (QLinearConv's form: ONNX Runtime's
ConvInteger, whose int32 sums are the result, is exact everywhere), and products. A
convolution of an odd channel count (an RGB stem) becomes MLAS's im2col columns and their
saturating product (qnn_columns.py), its pairs crossing taps as ONNX Runtime's do, its
bias and requantize on the product's rows. Depthwise convolutions are exact in ONNX
Runtime too and are left alone, as are int8 activations (exact there).

The config key `qnn.saturating_pairs` says when: "auto" (as ONNX Runtime on this CPU),
"always", "never". Runs after FakeQuantizationToInteger, before CanonicalizeQnn (which
keeps saturating calls for the kernels); `egc compile --check` runs it on its reference.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_ir import op
from egraph_ir.expr import Call, Expr, Function
from egraph_ir.module import IRModule
from egraph_ir.op.mlas import onnxruntime_saturates
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order, rewrite_calls

from ..config import register_config
from ..context import PassContext
from ..pass_base import FunctionPass
from ..registry import register_pass
from ..run import PassReport, record
from .canonicalize_qnn import integer_kernel_keeps
from .qnn_columns import as_nchw, columns_dense, columns_fit

register_config(
    "qnn.saturating_pairs",
    str,
    "auto",
    "how integer convolutions and products of uint8 data by int8 weights sum: 'auto' as ONNX "
    "Runtime's kernels on this CPU (in saturating int16 pairs where it has no VNNI), "
    "'always' or 'never'; applied where the integer kernels compute it (else exact)",
    choices=("auto", "always", "never"),
)

PRODUCTS = frozenset({"qnn_conv2d", "qnn_dense", "qnn_matmul"})


def saturating_wanted() -> bool:
    """Whether the current PassContext asks for ONNX Runtime's saturating pairs."""
    mode = PassContext.current().get_config("qnn.saturating_pairs")
    return mode == "always" or (mode == "auto" and onnxruntime_saturates())


def as_saturating(call: Call) -> Call:
    """The call (typed) with `pairs="saturating"` where it multiplies uint8 data by int8
    weights and an integer kernel computes it so: one group and an even channel count for
    a convolution. Any other call is returned as it is."""
    name = call.op.name  # type: ignore[union-attr]
    if name not in PRODUCTS or call.attrs["pairs"] != "exact":
        return call
    data, weight = (a.checked_type for a in call.args[:2])
    if (data.dtype, weight.dtype) != ("uint8", "int8"):  # type: ignore[attr-defined]
        return call
    if name == "qnn_conv2d" and (call.attrs["groups"] != 1 or weight.shape[1] % 2):  # type: ignore[attr-defined]
        return call
    saturating = call.with_same_type(pairs="saturating")
    return saturating if integer_kernel_keeps(saturating) else call


def _requantized_convolutions(fn: Function) -> set[int]:
    """The qnn_conv2d calls a requantize reads (through an int32 bias_add or not): the
    QLinearConv form, which ONNX Runtime's fused kernel sums."""
    found = set()
    for node in post_order(fn.body):
        if not (isinstance(node, Call) and getattr(node.op, "name", "") == "requantize"):
            continue
        acc = node.args[0]
        if isinstance(acc, Call) and getattr(acc.op, "name", "") == "bias_add":
            acc = acc.args[0]
        if isinstance(acc, Call) and getattr(acc.op, "name", "") == "qnn_conv2d":
            found.add(id(acc))
    return found


def onnxruntime_sums(fn: Function) -> tuple[Function, int]:
    """fn with its products summed as ONNX Runtime sums them here, and how many changed."""
    if not saturating_wanted():
        return fn, 0
    changed = [0]
    enabled = bool(PassContext.current().get_config("qnn.integer_kernels"))
    fused = _requantized_convolutions(fn)

    rows_of: dict[int, Expr] = {}  # a convolution written as columns: its product's rows

    def choose(call: Call, args: list[Expr], lookup: object) -> Expr:
        name = call.op.name  # type: ignore[union-attr]
        if name == "requantize":
            return _requantized_rows(call, args, rows_of)
        if name == "qnn_conv2d" and id(call) not in fused:
            return Call(call.op, tuple(args), call.attrs, call.span)
        if name == "qnn_conv2d" and enabled and columns_fit(call):
            changed[0] += 1
            rows_of[id(call)] = columns_dense(call, args[0])
            return as_nchw(call, rows_of[id(call)])
        chosen = as_saturating(call)
        changed[0] += chosen is not call
        return Call(call.op, tuple(args), chosen.attrs, call.span)

    return rewrite_calls(fn, PRODUCTS | {"requantize"}, choose), changed[0]


def _requantized_rows(call: Call, args: list[Expr], rows_of: dict[int, Expr]) -> Expr:
    """requantize((bias_add of) a convolution written as columns): the bias and requantize
    on the product's (pixels, O) rows, in its kernel's epilogue, and the bytes, not the
    int32 sums, transposed to NCHW (MobileNetV2's stem: 760 us of int32 transposed). The
    convolution's own NCHW form, which nothing else reads then, is dropped."""
    acc, bias = call.args[0], None
    if isinstance(acc, Call) and getattr(acc.op, "name", "") == "bias_add":
        if acc.attrs["axis"] not in (1, -3):  # not per channel: the NCHW form stays
            return Call(call.op, tuple(args), call.attrs, call.span)
        acc, bias = acc.args[0], args[0].args[1]  # type: ignore[attr-defined]
    rows = rows_of.get(id(acc))
    if rows is None:
        return Call(call.op, tuple(args), call.attrs, call.span)
    if bias is not None:
        rows = op.bias_add(rows, bias, axis=1)
    channels = acc.checked_type.shape[1]  # type: ignore[attr-defined]
    per_row = [_along_rows(a, channels) for a in args[1:]]
    assert isinstance(acc, Call)
    return as_nchw(acc, Call(call.op, (rows, *per_row), call.attrs, call.span))


def _along_rows(value: Expr, channels: int) -> Expr:
    """A requantize parameter for NCHW data (a scalar or one per channel) for (rows, O)."""
    t = value.checked_type if value.has_type else None
    if isinstance(t, TensorType) and t.size == channels and t.size > 1:
        return op.reshape(value, newshape=(channels,))
    return value


@register_pass
@dataclass(frozen=True)
class OnnxRuntimeSums(FunctionPass):
    """Integer products summed as ONNX Runtime's kernels on this CPU sum them (see the
    module docstring)."""

    idempotent = True
    opt_level = 0
    required = ("InferType",)

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out, count = onnxruntime_sums(fn)
        record(SumsReport(saturating=count))
        return out


@dataclass(frozen=True, slots=True)
class SumsReport(PassReport):
    """Integer products made to sum in saturating int16 pairs (or as columns and such a
    product) in one function."""

    saturating: int
