"""The lowering of one fused group: select its strategy (select.py), build the nests or the
library call it says, and fall back to the host's numpy where no native kernel exists."""

from __future__ import annotations

from egraph_ir.dims import Dim
from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Function
from egraph_ir.registry import Op
from egraph_ir.types import NARROW_FLOATS, NARROW_INTS, TensorType, tensor_types
from egraph_ir.visitor import post_order

from ..loop_ir import Kernel, Stmt
from ..runtime import blas
from .convert import block_transpose
from .group import Group, longer_than_one
from .joins import join_nest
from .kernels.conv.library import conv_kernel
from .kinds import CompiledKernel, GemmKernel, HostKernel, LoopKernel, Unsupported, operand
from .nests import argmax_nest, before_reshapes, elementwise_nest, product_nest, reduction_nest
from .scalars import hoist_scalars
from .select import (
    ArgMax,
    AvgPool,
    Elementwise,
    LibraryConv,
    LibraryProduct,
    LoopProduct,
    MaxPoolRows,
    Reduction,
    RowOp,
    Strategy,
    select,
    small_product,
)
from .strategy import NativeKernel
from .windows import avg_pool_nest, max_pool_rows, row_nest, row_shape

NARROW = set(NARROW_FLOATS) | set(NARROW_INTS)  # numpy computes them through ml_dtypes


def _op_calls(fn: Function) -> list[Call]:
    return [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]


def primitive_ops(fn: Function) -> list[str]:
    """The op names of a primitive function, producers first."""
    return [c.op.name for c in _op_calls(fn)]  # type: ignore[union-attr]


def lower(fn: Function, name: str, host_fallback: bool = True) -> CompiledKernel:
    """Lower a primitive function; fall back to the host, or raise CodegenError."""
    calls = _op_calls(fn)
    ops = [c.op.name for c in calls]  # type: ignore[union-attr]
    if _touches_an_empty_tensor(fn, calls):
        return HostKernel(name, ops, fn)  # no loop to generate; numpy's references agree
    try:
        narrow = _narrow_dtypes(fn, calls)
        if narrow:
            raise Unsupported(f"native kernels do not compute in {', '.join(narrow)}")
        compiled = build_kernel(Group(fn, name), calls, ops)
    except Unsupported as why:
        if not host_fallback:
            raise CodegenError(
                f"no compute definition for this group ({', '.join(ops)}): {why}; "
                "set codegen.host_fallback to run it with numpy"
            ) from None
        return HostKernel(name, ops, fn)
    hoist_scalars(compiled)
    return compiled


def _tensors(fn: Function, calls: list[Call]) -> list[TensorType]:
    """The tensors a group reads (parameters) or makes (its calls)."""
    types = [p.checked_type for p in fn.params] + [c.checked_type for c in calls]
    return [t for ty in types for t in tensor_types(ty)]


def _narrow_dtypes(fn: Function, calls: list[Call]) -> list[str]:
    """The storage-only dtypes (bfloat16, float8, int4, ...) a group reads or writes."""
    consts = [str(n.data.dtype) for n in post_order(fn.body) if isinstance(n, Constant)]
    found = {t.dtype for t in _tensors(fn, calls)} | set(consts)
    return sorted(found & NARROW)


def _touches_an_empty_tensor(fn: Function, calls: list[Call]) -> bool:
    """A group reading or writing a tensor with an axis of extent 0."""
    return any(t.size == 0 for t in _tensors(fn, calls))


def build_kernel(group: Group, calls: list[Call], ops: list[str]) -> CompiledKernel:
    """The kernel of the strategy select() picks for the group."""
    anchor, strategy = select(group.fn, calls)
    group.anchor = anchor
    # a layout conversion the register transpose does not take (fused with other ops, or
    # under 16 pixels a plane) reads across planes in its innermost loop: a fully unrolled
    # 7x7 map of 16 strided reads per pixel took LLVM 350 ms to optimise
    rolled = "layout_transform" in ops
    if anchor is None:
        if (transposed := block_transpose(group)) is not None:
            return _loops(group, *transposed, ops)
        if (joined := join_nest(group)) is not None:
            return _loops(group, *joined, ops)
        root, shape = before_reshapes(group.fn.body)  # the finer shape of the two
        return _loops(group, elementwise_nest(group, root, rolled), shape, ops)
    if isinstance(strategy, NativeKernel):
        return _native(group, anchor, strategy, ops)
    body, extent = _anchor_nest(group, anchor, strategy)
    if anchor is not group.fn.body and not group.in_registers:
        body += elementwise_nest(group, group.fn.body, rolled)
    loops = _loops(group, body, extent, ops, anchor) if body else None
    match strategy:
        case LibraryProduct():
            a, b = (operand(x, group.fn.params) for x in anchor.args)
            static = all(t.is_static for t in _tensors(group.fn, [anchor]))
            # a symbolic product: described by its sizes where it can be, else per size
            product = blas.product_of(anchor) if static else blas.sized_product_of(anchor)
            return GemmKernel(group.name, ops, product, (a, b), loops)
        case LibraryConv():
            return conv_kernel(group, anchor, ops, loops)
    assert loops is not None
    return loops


def _native(group: Group, anchor: Call, kernel: NativeKernel, ops: list[str]) -> CompiledKernel:
    """A native kernel with the group's epilogue fused into it; the epilogue reads the
    anchor's result where the kernel leaves it."""
    group.anchor_load = kernel.anchor_load(group, anchor)
    anchor_t = anchor.checked_type
    assert isinstance(anchor_t, TensorType)
    dtype_changes = anchor_t.dtype != group.out_type.dtype and not group.in_registers
    if dtype_changes and not kernel.ANY_RESULT_DTYPE:
        raise Unsupported(f"{anchor.op.name} writes its result in the output: no dtype change")  # type: ignore[union-attr]
    return kernel.build(group, anchor, ops)


def _anchor_nest(
    group: Group, anchor: Call, strategy: Strategy
) -> tuple[list[Stmt], tuple[int, ...]]:
    """The anchor's own nest (none for library and micro-kernel anchors) and the shape whose
    first axis longer than one the threads split."""
    shape = group.out_type.shape
    match strategy:
        case Reduction():
            return reduction_nest(group, anchor), shape
        case ArgMax():
            return argmax_nest(group, anchor), shape
        case LoopProduct():
            return product_nest(group, anchor), shape
        case MaxPoolRows():
            return max_pool_rows(group, anchor), shape[:-1]
        case AvgPool():
            return avg_pool_nest(group, anchor), shape
        case RowOp():
            return row_nest(group, anchor), row_shape(anchor)
        case LibraryProduct() | LibraryConv() | Elementwise() | NativeKernel():
            return [], shape


def _loops(
    group: Group,
    body: list[Stmt],
    extent: tuple[int, ...],
    ops: list[str],
    anchor: Call | None = None,
) -> LoopKernel:
    """The nests as one JIT kernel; its work estimate sizes the thread split."""
    work: int | Dim = group.out_type.size * max(len(ops), 1)  # a Dim in a symbolic group
    if anchor is not None:  # a reduction reads more than it writes
        work += _anchor_work(anchor)
    kernel = Kernel(group.name, group.kernel_buffers(), body, _outer_extent(extent), work)
    return LoopKernel(group.name, ops, kernel, dict(group.constants))


def _anchor_work(anchor: Call) -> int | Dim:
    """Element operations of a loop anchor: its input elements (reductions, pooling,
    softmax), or multiply-adds for a product."""
    out_t = anchor.checked_type
    assert isinstance(out_t, TensorType)
    if small_product(anchor):
        a_t = anchor.args[0].checked_type
        assert isinstance(a_t, TensorType)
        return out_t.size * a_t.shape[-1]
    inputs = [a.checked_type for a in anchor.args]
    return sum(t.size for t in inputs if isinstance(t, TensorType))


def _outer_extent(shape: tuple[int | Dim, ...]) -> int | Dim:
    return next((d for d in shape if longer_than_one(d)), 1)
