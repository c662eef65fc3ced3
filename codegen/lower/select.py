"""Which kernel a fused group becomes: its anchor op (if any) and a `Strategy`.

The choice is a table from the anchor's op name to a chooser, each a few lines that read
the call's shapes and dtypes; a group without an anchor is `Elementwise`. Everything else
in codegen/lower/ builds the chosen strategy and decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from egraph_ir.dims import typical
from egraph_ir.egraph.kernel_cost import call_key
from egraph_ir.expr import Call, Constant, Function, Var
from egraph_ir.registry import Op, OpPattern
from egraph_ir.types import TensorType

from ..measure import choices
from ..runtime import blas
from .kernels.conv import channels, int8, winograd
from .kernels.conv.channels import ChannelConv
from .kernels.conv.channels_int8 import Int8ChannelConv
from .kernels.conv.depthwise_int8 import ByteDepthwise
from .kernels.conv.depthwise_int8 import depthwise_fits as byte_depthwise_fits
from .kernels.conv.direct import DirectConv, columns_fit, direct_fits
from .kernels.conv.int8 import Int8Conv
from .kernels.conv.nchwc import int8 as nchwc_int8
from .kernels.conv.nchwc.depthwise import BlockedDepthwise
from .kernels.conv.nchwc.depthwise import depthwise_fits as blocked_depthwise_fits
from .kernels.conv.nchwc.int8 import Int8BlockedDepthwise, Int8BlockedPointwise
from .kernels.conv.nchwc.pointwise import (
    BlockedPointwise,
    pointwise_fits,
    pointwise_layout,
    window_fits,
)
from .kernels.conv.prologue import uniform_phases
from .kernels.conv.shape import ConvShape, Wide
from .kernels.conv.winograd import BlockedWinograd, WinogradShape
from .kernels.gemm import int8 as gemm_int8
from .kernels.gemm.int8 import Int8Product
from .kernels.gemm.packed import (
    MlasProduct,
    PackedProduct,
    mlas_fits,
    mlas_product,
    pack,
    packed_fits,
)
from .kinds import Unsupported
from .strategy import NativeKernel


@dataclass(frozen=True)
class Elementwise:
    """One loop nest over the output, every producer inlined."""


@dataclass(frozen=True)
class Reduction:
    """sum, mean, max, min, prod and global average pooling: an accumulator per output."""


@dataclass(frozen=True)
class ArgMax:
    """The index of the first maximum along an axis (or over all elements)."""


@dataclass(frozen=True)
class LoopProduct:
    """dense / matmul / batch_matmul as plain loops: small or integer products."""


@dataclass(frozen=True)
class LibraryProduct:
    """A product through BLAS, then the epilogue as a JIT loop over its result."""


@dataclass(frozen=True)
class MaxPoolRows:
    """Max pooling a row of outputs at a time (the innermost loop runs along the row)."""


@dataclass(frozen=True)
class AvgPool:
    """Average pooling, one output element at a time."""


@dataclass(frozen=True)
class RowOp:
    """softmax / log_softmax along one axis (max, sum of exponentials, normalise), or
    layer_norm over the last (mean, mean squared deviation, normalise)."""


@dataclass(frozen=True)
class LibraryConv:
    """A 1x1 convolution as a GEMM on the input, im2col + GEMM, or grouped direct loops."""


# loop nests and library calls (built by driver.py), or a native kernel (its own build)
Strategy = (
    Elementwise
    | Reduction
    | ArgMax
    | LoopProduct
    | LibraryProduct
    | MaxPoolRows
    | AvgPool
    | RowOp
    | LibraryConv
    | NativeKernel
)

PRODUCTS = ("dense", "matmul", "batch_matmul")
REDUCTIONS = ("sum", "mean", "max", "min", "prod", "global_avg_pool2d")
ROW_OPS = ("softmax", "log_softmax", "layer_norm")
SMALL_PRODUCT = 1 << 16  # multiply-adds below which loops beat a BLAS call


def is_anchor(c: Call) -> bool:
    """A call that needs its own nest (or library call) rather than inlining."""
    op = c.op
    assert isinstance(op, Op)
    return (
        op.pattern in (OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE) or op.name in ROW_OPS
    )


def small_product(call: Call) -> bool:
    """Products that run as loops: under SMALL_PRODUCT multiply-adds, or not float (BLAS
    has no integer GEMM)."""
    if not isinstance(call.op, Op) or call.op.name not in PRODUCTS:
        return False
    a_t, out_t = call.args[0].checked_type, call.checked_type
    if not (isinstance(a_t, TensorType) and isinstance(out_t, TensorType)):
        return False
    transposed = call.op.name == "batch_matmul" and call.attrs["transpose_a"]
    k = a_t.shape[-2] if transposed else a_t.shape[-1]
    # a symbolic product (a kernel for every size) is judged at the typical sizes
    return typical(out_t.size * k) <= SMALL_PRODUCT or a_t.dtype not in blas.BLAS_DTYPES


def _materialised(anchor: Call) -> None:
    if any(not isinstance(x, Var | Constant) for x in anchor.args):
        raise Unsupported(f"{anchor.op.name} takes materialised inputs")  # type: ignore[union-attr]


def _product(anchor: Call) -> Strategy:
    if packed_fits(anchor) and isinstance(anchor.args[0], Var):
        return PackedProduct(pack(anchor))
    if small_product(anchor):
        return LoopProduct()
    _materialised(anchor)
    return LibraryProduct()


def _dense_mlas(anchor: Call) -> Strategy:
    """The packed kernel, which sums as MLAS does (constant weights, padded to whole
    panels there); no other kernel does, so elsewhere the host runs the op's reference."""
    if packed_fits(anchor) and isinstance(anchor.args[0], Var):
        return PackedProduct(pack(anchor))
    raise Unsupported("dense_mlas outside the packed kernel (constant weights)")


def _matmul_mlas(anchor: Call) -> Strategy:
    """MLAS's own orientation (a constant left operand broadcast, columns filling 16
    lanes); elsewhere the host runs the op's reference, as for dense_mlas."""
    if mlas_fits(anchor) and isinstance(anchor.args[1], Var):
        return MlasProduct(mlas_product(anchor))
    raise Unsupported("matmul_mlas outside its kernel (a constant a, columns of 16)")


MAX_PHASES = 16  # stride phases (sh * sw) the direct kernel splits its input into


def _conv2d(anchor: Call) -> Strategy:
    """The direct micro-kernel wherever it fits (codegen/lower/kernels/conv/direct.py), 1x1
    convolutions included: where their rows do not split into whole register blocks (7x7, 14x14) the
    wide rows still beat a GEMM on the input, whose columns are too few for BLAS. Past MAX_PHASES
    stride phases whose copies differ (padding reaches some of them) the phase-split copy is one
    loop nest per phase, a huge kernel for LLVM: im2col and a GEMM instead. A uniform grid of phases
    (a ViT's 16x16 non-overlapping patches) is one loop and stays direct. Where output channels can
    fill the vector lanes instead (kernels/conv/channels.py), the kernel database's measurement for
    this shape decides (codegen/measure/choices.py, `egc tune`), else the shape rule that measured
    faster here."""
    _materialised(anchor)
    if not direct_fits(anchor):
        return LibraryConv()
    shape, wide = ConvShape.of(anchor), Wide.of(anchor)
    many = shape.sh * shape.sw > MAX_PHASES and not uniform_phases(anchor, wide)
    if many and columns_fit(anchor):
        return LibraryConv()
    if not channels.can_take(anchor):
        return DirectConv(wide)
    measured = choices.choose(tuning_key(anchor), CONV_CANDIDATES)
    if measured == ChannelConv.NAME or (measured is None and channels.worth_it(anchor, wide)):
        return ChannelConv(channels.layout(anchor, wide))
    return DirectConv(wide)


def _layer_norm(anchor: Call) -> Strategy:
    """A row kernel for float32 rows normalised over the last axis (gamma and beta one
    value per element of a row); other layer norms run their reference on the host (at
    opt level 0-2 SimplifyInference has made them elementwise ops already)."""
    x, gamma, beta = (a.checked_type for a in anchor.args)
    assert isinstance(x, TensorType)
    last = anchor.attrs["axis"] % x.ndim == x.ndim - 1
    vectors = all(isinstance(v, TensorType) and v.shape == x.shape[-1:] for v in (gamma, beta))
    if isinstance(anchor.args[0], Var) and x.dtype == "float32" and last and vectors:
        return RowOp()
    raise Unsupported("layer_norm: native for float32 rows over the last axis only")


def _qnn_conv2d(anchor: Call) -> Strategy:
    """The int8 kernel, or for depthwise calls the byte depthwise one; CanonicalizeQnn
    lowers every other qnn_conv2d to floats, so one reaching here without fitting was
    built by hand (the host runs its reference)."""
    _materialised(anchor)
    if int8.fits(anchor):
        wide = int8.layout(anchor)
        if int8.channels_worth_it(anchor, wide):
            return Int8ChannelConv(int8.channel_layout(anchor, wide))
        return Int8Conv(wide)
    if byte_depthwise_fits(anchor):
        return ByteDepthwise(int8.layout(anchor))
    raise Unsupported("qnn_conv2d outside the int8 kernels (int8 weights, zero point 0)")


def _qnn_conv2d_nchwc(anchor: Call) -> Strategy:
    """The blocked int8 kernels take the forms blocked.rules makes (depthwise, pointwise)
    on a host with VNNI; others run their reference on the host."""
    _materialised(anchor)
    if nchwc_int8.depthwise_fits(anchor):
        return Int8BlockedDepthwise()
    if nchwc_int8.pointwise_fits(anchor):
        return Int8BlockedPointwise(nchwc_int8.word_layout(anchor))
    raise Unsupported("qnn_conv2d_nchwc other than uint8 depthwise or pointwise with VNNI")


def _qnn_product(anchor: Call) -> Strategy:
    """The int8 product; CanonicalizeQnn lowers the products it does not take."""
    if not gemm_int8.fits(anchor) or not isinstance(anchor.args[0], Var):
        raise Unsupported("a quantised product outside the int8 kernel")
    return Int8Product(*gemm_int8.pack(anchor))


def _conv2d_nchwc(anchor: Call) -> Strategy:
    """The blocked kernels take the forms blocked.rules makes (depthwise, pointwise); one
    built by hand in another form runs its reference on the host."""
    _materialised(anchor)
    if blocked_depthwise_fits(anchor):
        return BlockedDepthwise()
    if pointwise_fits(anchor) or window_fits(anchor):
        return BlockedPointwise(pointwise_layout(anchor))
    raise Unsupported(
        "conv2d_nchwc other than float32 depthwise, pointwise or NCHW-in on 16-lane blocks"
    )


def _conv2d_winograd(anchor: Call) -> Strategy:
    """The Winograd kernel takes what kernels.rules makes: float32 blocks of 16 in and
    out, tiles of 2 or 4; other forms run their reference on the host."""
    _materialised(anchor)
    if not winograd.fits(anchor):
        raise Unsupported("conv2d_winograd other than float32 on 16-lane blocks")
    return BlockedWinograd(winograd.layout(anchor), WinogradShape.of(anchor).tile)


# the kernels the database may choose between, by NAME
CONV_CANDIDATES = (DirectConv.NAME, ChannelConv.NAME)


def tuning_key(anchor: Call) -> str:
    """What a measured choice depends on: the op, every size and attribute, the dtype (the
    store's shape key, which the layout cost model reads too)."""
    return call_key(anchor)


def tunable(anchor: Call) -> tuple[str, tuple[str, ...]] | None:
    """(key, candidates) when the kernel of this anchor is a measured choice, else None:
    asked of _conv2d itself, with the channel kernel forced, so it is a choice exactly
    where lowering consults the database."""
    if not (isinstance(anchor.op, Op) and anchor.op.name == "conv2d"):
        return None
    try:
        with choices.forcing(ChannelConv.NAME):
            chosen = _conv2d(anchor)
    except Unsupported:
        return None
    return (tuning_key(anchor), CONV_CANDIDATES) if isinstance(chosen, ChannelConv) else None


CHOOSERS: dict[str, Callable[[Call], Strategy]] = {
    **dict.fromkeys(REDUCTIONS, lambda _: Reduction()),
    "argmax": lambda _: ArgMax(),
    **dict.fromkeys(PRODUCTS, _product),
    "dense_mlas": _dense_mlas,
    "matmul_mlas": _matmul_mlas,
    "max_pool2d": lambda _: MaxPoolRows(),
    "avg_pool2d": lambda _: AvgPool(),
    "softmax": lambda _: RowOp(),
    "log_softmax": lambda _: RowOp(),
    "layer_norm": _layer_norm,
    "conv2d": _conv2d,
    "qnn_conv2d": _qnn_conv2d,
    "conv2d_nchwc": _conv2d_nchwc,
    "qnn_conv2d_nchwc": _qnn_conv2d_nchwc,
    "conv2d_winograd": _conv2d_winograd,
    "qnn_matmul": _qnn_product,
    "qnn_dense": _qnn_product,
}


def select(fn: Function, calls: list[Call]) -> tuple[Call | None, Strategy]:
    """The group's anchor (None: none) and the strategy that lowers it."""
    anchors = [c for c in calls if is_anchor(c)]
    if len(anchors) > 1:
        raise Unsupported("more than one anchor")
    if not anchors:
        return None, Elementwise()
    anchor = anchors[0]
    name = anchor.op.name  # type: ignore[union-attr]
    anchor_t, out_t = anchor.checked_type, fn.body.checked_type
    assert isinstance(anchor_t, TensorType) and isinstance(out_t, TensorType)
    if anchor is not fn.body and anchor_t.shape != out_t.shape:
        raise Unsupported("the epilogue changes the anchor's shape")
    chooser = CHOOSERS.get(name)
    if chooser is None:
        raise Unsupported(f"{name} has no compute definition")
    return anchor, chooser(anchor)
