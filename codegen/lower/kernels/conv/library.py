"""The convolutions the native micro-kernels do not take (LibraryConv): a 1x1 as a GEMM
on the input ("conv/gemm"), float64 as a GEMM over JIT im2col columns ("conv/im2col"),
the rest (grouped float64 or float16, negative padding) as direct loops over the padded
input ("conv/grouped"), each followed by the group's epilogue."""

from __future__ import annotations

from functools import partial

from egraph_ir.expr import Call, Var

from ...group import Group
from ...kinds import ConvKernel, LoopKernel, Unsupported, operand
from .direct import columns_fit, columns_product, pointwise, pointwise_product
from .prologue import grouped_kernel, im2col_kernel, pad_kernel
from .shape import ConvShape


def conv_kernel(
    group: Group, anchor: Call, ops: list[str], epilogue: LoopKernel | None
) -> ConvKernel:
    """The convolutions the direct micro-kernel does not take: a 1x1 as a GEMM on the
    input, float64 as a GEMM over JIT im2col columns, the rest (grouped float64 or
    float16, negative padding) as direct loops over the padded input."""
    if not isinstance(anchor.args[0], Var):
        raise Unsupported("conv2d of a constant input")
    source = group.fn.params.index(anchor.args[0])
    weights = operand(anchor.args[1], group.fn.params)
    kernel = partial(ConvKernel, group.name, ops, source, weights, epilogue=epilogue)
    if pointwise(anchor):
        return kernel(None, None, gemm=pointwise_product(anchor), variant="gemm")
    if columns_fit(anchor):
        columns, scratch = im2col_kernel(anchor, f"{group.name}_im2col")
        return kernel(columns, None, (scratch,), columns_product(anchor), variant="im2col")
    pad, scratch = pad_kernel(ConvShape.of(anchor), f"{group.name}_pad")
    grouped = grouped_kernel(anchor, f"{group.name}_conv")
    return kernel(pad, grouped, (scratch,), variant="grouped")
