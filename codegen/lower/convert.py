"""A layout conversion between NCHW and NCHW16c on its own: a 16 x 16 transpose in
registers per 16 pixels of a channel block.

Written as element loops, the conversion reads across 16 planes in its innermost loop:
LLVM vectorises that with gathers or long shuffle chains, and where it unrolls a small
map whole (7x7 of 512 channels) it spent 350 ms optimising one such kernel. Here each step
loads 16 vectors (16 pixels of 16 channels, or 16 channels of 16 pixels), transposes them
in four rounds of shuffles and stores 16 vectors: contiguous on both sides. A map whose
pixel count is not a multiple of 16 moves its last step back to end at the last pixel
(some pixels are written twice, with the same values).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from egraph_ir.expr import Call, Var
from egraph_ir.measured import native_16_lanes
from egraph_ir.registry import Op
from egraph_ir.types import TensorType

from ..loop_ir import INDEX, LANES, Bin, For, LExpr, Load, LoopVar, Stmt, Store, idx
from .group import Group
from .kernels.conv.nchwc.pointwise import transpose_lanes

HALF = LANES // 2  # the lanes of an AVX2 register
FORMS = {("NCHW", f"NCHW{LANES}c"), (f"NCHW{LANES}c", "NCHW")}


def block_transpose(group: Group) -> tuple[list[Stmt], tuple[int, ...]] | None:
    """The conversion's loops and the extent the threads split (channel blocks), for a
    group that is one float32 conversion between NCHW and NCHW16c of a parameter with at
    least 16 pixels per plane; None for anything else."""
    call = group.fn.body
    if not (isinstance(call, Call) and isinstance(call.op, Op)):
        return None
    if call.op.name != "layout_transform" or not isinstance(call.args[0], Var):
        return None
    x_t, out_t = call.args[0].checked_type, call.checked_type
    form = (call.attrs["src_layout"], call.attrs["dst_layout"])
    if not (isinstance(x_t, TensorType) and isinstance(out_t, TensorType)):
        return None
    if form not in FORMS or x_t.dtype != "float32":
        return None
    blocked = form[1] != "NCHW"
    n, c, h, w = out_t.shape[:4] if not blocked else x_t.shape
    if c % LANES or h * w < LANES:
        return None
    source = group.buffers[call.args[0]].name
    return _steps(source, n * c // LANES, h * w, blocked), (n * c // LANES,)


def _transpose(
    source: str, reads: Callable[[int], LExpr], writes: Callable[[int], LExpr], width: int
) -> list[Stmt]:
    """Rows reads(k) of 16 lanes, stored transposed as rows writes(k): one 16 x 16
    transpose of 16-lane vectors, or (width 8, an AVX2 host) four 8 x 8 transposes of its
    quarters. AVX2 has no 16-lane registers: LLVM's lowering of the wide shuffles took
    0.12 s of machine code generation per conversion kernel, the quarters' a fraction."""
    body: list[Stmt] = []
    dtype = f"float32x{width}"
    for row_part, column_part in itertools.product(range(0, LANES, width), repeat=2):
        rows: list[LExpr] = [
            Load(dtype, source, reads(row_part + k) + column_part) for k in range(width)
        ]
        shuffles, columns = transpose_lanes(rows, f"tr{row_part}_{column_part}_")
        body += shuffles
        body += [Store("out", writes(column_part + k) + row_part, columns[k]) for k in range(width)]
    return body


def _steps(source: str, blocks: int, pixels: int, blocked: bool) -> list[Stmt]:
    """For each channel block and step of 16 pixels: load, transpose, store."""
    block, step = LoopVar(INDEX, "blk"), LoopVar(INDEX, "px")
    first = Bin(INDEX, "min", step * LANES, idx(pixels - LANES))

    def plane_at(k: int) -> LExpr:  # channel k of the block, from the step's first pixel
        return (block * LANES + k) * pixels + first

    def pixel_at(k: int) -> LExpr:  # the step's pixel k, all 16 channels of the block
        return (block * pixels + first + k) * LANES

    reads, writes = (plane_at, pixel_at) if blocked else (pixel_at, plane_at)
    body = _transpose(source, reads, writes, LANES if native_16_lanes() else HALF)
    steps = -(-pixels // LANES)
    return [For(block.name, blocks, [For(step.name, steps, body, unroll=False)], outer=True)]
