"""Converters of neural-network layers: products (MatMul, Gemm, Einsum), convolutions
(Conv, ConvTranspose), pooling (Max/Average/Lp/Global), normalisations (Batch, Layer,
Instance, RMS, Lp, LRN) and Dropout. 3-D convolutions and pools are in volume.py."""

from __future__ import annotations

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr, TupleGetItem
from ...op.mlas import onnxruntime_threads
from ...types import TensorType
from .node import Node, converter, scalar
from .volume import Depth, conv3d, conv3d_of, covered, pool3d, static_shape
from .windows import Window, onnx_pads


@converter("MatMul")
def _matmul(n: Node) -> Expr:
    return op.matmul(n.x(0), n.x(1))


@converter("Gemm")
def _gemm(n: Node) -> Expr:
    a, b = n.x(0), n.x(1)
    if n.attr("transA", 0):
        a = op.transpose(a, axes=(1, 0))
    out = op.dense(a, b) if n.attr("transB", 0) else op.matmul(a, b)
    dtype = n.type(0).dtype
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if alpha != 1.0:
        out = op.multiply(out, Constant(np.asarray(alpha, dtype=dtype)))
    c = n.input(2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = op.multiply(c, Constant(np.asarray(beta, dtype=dtype)))
        out = op.add(out, c)
    return out


@converter("Conv")
def _conv(n: Node) -> Expr:
    if n.type().ndim == 5:
        return conv3d(n)
    win = Window(n, n.type(1).shape[2:])
    groups = int(n.attr("group", 1))
    if _in_mlas_order(n, win, groups):
        bias = n.input(2)
        if bias is None:
            bias = Constant(np.zeros(n.type(1).shape[0], "float32"))
        return op.conv2d_mlas(
            win.x, n.x(1), bias, strides=win.strides, padding=win.pads,
            dilation=win.dilations, groups=groups, threads=onnxruntime_threads(),
        )  # fmt: skip
    out = op.conv2d(
        win.x,
        win.lift(n.x(1)),
        strides=win.strides,
        padding=win.pads,
        dilation=win.dilations,
        groups=int(n.attr("group", 1)),
    )
    bias = n.input(2)
    out = op.bias_add(out, bias, axis=1) if bias is not None else out
    return win.finish(out)


def _in_mlas_order(n: Node, win: Window, groups: int) -> bool:
    """A float Conv of a quantised group ONNX Runtime does not fuse (ort_islands.py): one
    2-D image, one group or depthwise, known sizes (op conv2d_mlas; other convolutions
    sum in our order)."""
    if not n.importer.islands.reads_float(n.proto, 0) or win.one_d:
        return False
    x, w = n.type(), n.type(1)
    static = all(isinstance(d, int) for d in (*x.shape, *w.shape))
    depthwise = groups == x.shape[1] == w.shape[0] and w.shape[1] == 1
    # one group of >= 2 rows per thread: MLAS gives a single row its one-row kernel
    full = groups == 1 and w.shape[0] >= 2 * onnxruntime_threads()
    return static and x.ndim == 4 and x.shape[0] == 1 and (full or depthwise)


@converter("MaxPool", "AveragePool")
def _pool(n: Node) -> Expr:
    if n.type().ndim == 5:
        if len(n.proto.output) > 1 and n.proto.output[1]:
            raise FrontendError("MaxPool's Indices output is not supported")
        return pool3d(n)
    win = Window(n)
    common = {
        "pool_size": win.kernel,
        "strides": win.strides,
        "padding": win.pads,
        "dilation": win.dilations,
        "ceil_mode": bool(n.attr("ceil_mode", 0)),
    }
    if n.op_type == "MaxPool":
        if len(n.proto.output) > 1 and n.proto.output[1]:
            raise FrontendError("MaxPool's Indices output is not supported")
        return win.finish(op.max_pool2d(win.x, **common))
    include = bool(n.attr("count_include_pad", 0))
    return win.finish(op.avg_pool2d(win.x, **common, count_include_pad=include))


@converter("GlobalAveragePool")
def _global_avg_pool(n: Node) -> Expr:
    t = n.type()
    if t.ndim < 3:
        raise FrontendError(f"GlobalAveragePool needs (N, C, ...), got input {t}")
    return (
        op.mean(n.x(), axis=tuple(range(2, t.ndim)), keepdims=True)
        if t.ndim != 4
        else (op.global_avg_pool2d(n.x()))
    )


@converter("GlobalMaxPool")
def _global_max_pool(n: Node) -> Expr:
    t = n.type()
    if t.ndim < 3:
        raise FrontendError(f"GlobalMaxPool needs (N, C, ...), got input {t}")
    return op.max(n.x(), axis=tuple(range(2, t.ndim)), keepdims=True)


@converter("BatchNormalization")
def _batch_norm(n: Node) -> Expr:
    if n.attr("training_mode", 0):
        raise FrontendError("training_mode=1 is not supported (inference only)")
    bn = op.batch_norm(
        n.x(0), n.x(1), n.x(2), n.x(3), n.x(4), axis=1, epsilon=float(n.attr("epsilon", 1e-5))
    )
    return TupleGetItem(bn, 0)


@converter("LayerNormalization")
def _layer_norm(n: Node) -> list[Expr]:
    t = n.type()
    axis = n.attr("axis", -1) % t.ndim
    eps = float(n.attr("epsilon", 1e-5))
    gamma = n.x(1)
    if any(o for o in n.proto.output[1:]):  # Mean and InvStdDev over the normalised axes
        axes = tuple(range(axis, t.ndim))
        mean = op.mean(n.x(), axis=axes, keepdims=True)
        centred = op.subtract(n.x(), mean)
        var = op.mean(op.multiply(centred, centred), axis=axes, keepdims=True)
        inv_std = op.rsqrt(op.add(var, Constant(np.asarray(eps, dtype=t.dtype))))
        normed = op.multiply(centred, inv_std)
        normed = op.multiply(normed, gamma)
        beta_in = n.input(2)
        if beta_in is not None:
            normed = op.add(normed, beta_in)
        return [normed, mean, inv_std]
    beta = n.input(2)
    if beta is None:
        beta = Constant(np.zeros(n.type(1).shape, dtype=t.dtype))
    if axis == t.ndim - 1:
        return [op.layer_norm(n.x(), gamma, beta, axis=-1, epsilon=eps)]
    inner = int(np.prod(t.shape[axis:]))  # normalise over several trailing axes: flatten them
    flat = op.reshape(n.x(), newshape=(*t.shape[:axis], inner))
    g, b = op.reshape(gamma, newshape=(inner,)), op.reshape(beta, newshape=(inner,))
    normed = op.layer_norm(flat, g, b, axis=-1, epsilon=eps)
    return [op.reshape(normed, newshape=t.shape)]


@converter("Dropout")
def _dropout(n: Node) -> list[Expr]:
    training = n.const(2, np.asarray(False))
    if bool(np.asarray(training)):
        raise FrontendError("training_mode=True is not supported (inference only)")
    t = n.type()
    return [n.x(), Constant(np.ones(t.shape, dtype=bool))]  # inference: identity, full mask


@converter("LpNormalization")
def _lp_normalization(n: Node) -> Expr:
    t = n.type()
    p = int(n.attr("p", 2))
    axis = int(n.attr("axis", -1)) % t.ndim
    x = n.x()
    if p == 1:
        norm = op.sum(op.abs(x), axis=(axis,), keepdims=True)
    elif p == 2:
        norm = op.sqrt(op.sum(op.multiply(x, x), axis=(axis,), keepdims=True))
    else:
        raise FrontendError(f"p must be 1 or 2, got {p}")
    # a zero norm means a zero slice, which stays zero (as ONNX's reference)
    one, zero = scalar(1, t.dtype), scalar(0, t.dtype)
    return op.divide(x, op.where(op.equal(norm, zero), one, norm))


@converter("InstanceNormalization")
def _instance_norm(n: Node) -> Expr:
    eps = float(n.attr("epsilon", 1e-5))
    return op.instance_norm(n.x(0), n.x(1), n.x(2), axis=1, epsilon=eps)


@converter("LRN")
def _lrn(n: Node) -> Expr:
    """x / (bias + alpha / size * (sum of x^2 over `size` neighbouring channels))^beta; the
    window sum is an average pool over (channel, 1) windows times its size."""
    t = n.type()
    size = int(n.attr("size"))
    alpha, beta = float(n.attr("alpha", 1e-4)), float(n.attr("beta", 0.75))
    bias = float(n.attr("bias", 1.0))
    x = n.x()
    square = op.multiply(x, x)
    # channels as the pooled height of a (N, 1, C, rest) image
    rest = int(np.prod(t.shape[2:], dtype=np.int64))
    image = op.reshape(square, (t.shape[0], 1, t.shape[1], rest))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    window = op.avg_pool2d(
        image, pool_size=(size, 1), strides=(1, 1), padding=(before, 0, after, 0),
        count_include_pad=True,
    )  # fmt: skip
    # alpha / size * (window sum) = alpha * (window mean)
    scale = op.add(
        scalar(bias, t.dtype), op.multiply(op.reshape(window, t.shape), scalar(alpha, t.dtype))
    )
    return op.divide(x, op.power(scale, scalar(beta, t.dtype)))


@converter("LpPool")
def _lp_pool(n: Node) -> Expr:
    """(sum over the window of |x|^p)^(1/p): an average pool of |x|^p over the input
    elements each window covers, times their number (padding adds nothing; windows of
    ceil mode reaching past the padding cover fewer elements than the kernel's size)."""
    t = n.type()
    p = float(n.attr("p", 2))
    powered = op.power(op.abs(n.x()), scalar(p, t.dtype))
    if t.ndim == 5:
        kernel = tuple(n.attr("kernel_shape"))
        strides = tuple(n.attr("strides", [1] * 3))
        dilations = tuple(n.attr("dilations", [1] * 3))
        begins = onnx_pads(n, t, kernel, strides, dilations)[:3]
        mean = pool3d(n, powered, include=False)
        sizes = t.shape[2:]
    else:
        win = Window(n)
        mean = op.avg_pool2d(
            win.lift(powered), pool_size=win.kernel,
            strides=win.strides, padding=win.pads, dilation=win.dilations,
            ceil_mode=bool(n.attr("ceil_mode", 0)), count_include_pad=False,
        )  # fmt: skip
        kernel, strides, dilations, begins = win.kernel, win.strides, win.dilations, win.pads[:2]
        sizes = static_shape(win.x)[2:]
    counts = covered(sizes, kernel, strides, dilations, begins, static_shape(mean)[2:])
    total = op.multiply(mean, Constant(counts.astype(t.dtype)[None, None]))
    if not counts.all():  # a window wholly in padding averages nothing (NaN): its sum is 0
        total = op.where(Constant(counts[None, None] > 0), total, scalar(0.0, t.dtype))
    out = op.power(total, scalar(1.0 / p, t.dtype))
    return win.finish(out) if t.ndim != 5 else out


@converter("RMSNormalization")
def _rms_norm(n: Node) -> Expr:
    """x / sqrt(mean(x^2 over the axes from `axis` on) + epsilon) * scale, computed in
    float32 for float16 inputs (the default stash_type)."""
    t = n.type()
    axis = n.attr("axis", -1) % t.ndim
    eps = float(n.attr("epsilon", 1e-5))
    x, scale = n.x(0), n.x(1)
    wide = t.dtype == "float16" and n.attr("stash_type", 1) == 1
    if wide:
        x = op.cast(x, dtype="float32")
    dtype = "float32" if wide else t.dtype
    axes = tuple(range(axis, t.ndim))
    mean_square = op.mean(op.multiply(x, x), axis=axes, keepdims=True)
    inv = op.rsqrt(op.add(mean_square, Constant(np.asarray(eps, dtype=dtype))))
    normed = op.multiply(x, inv)
    if wide:
        normed = op.cast(normed, dtype=t.dtype)
    return op.multiply(normed, scale)


@converter("Einsum")
def _einsum(n: Node) -> Expr:
    return op.einsum(*n.inputs(), equation=n.attr("equation"))


@converter("ConvTranspose")
def _conv_transpose(n: Node) -> Expr:
    """A transposed convolution as a direct one (which compiles natively): zeros between
    the input's pixels (stride - 1 of them), the kernel flipped with its in and out channels
    swapped per group, padding d * (k - 1) - pads (+ output_padding at the end). 1-D is
    lifted to 2-D; 3-D runs as the 3-D convolution (volume.py)."""
    t, w = n.type(0), n.type(1)
    if t.ndim not in (3, 4, 5):
        raise FrontendError(f"only 1-D, 2-D and 3-D ConvTranspose, got input {t}")
    spatial = t.ndim - 2
    groups = int(n.attr("group", 1))
    kernel = [int(k) for k in n.attr("kernel_shape", w.shape[2:])]
    strides = [int(s) for s in n.attr("strides", [1] * spatial)]
    dilations = [int(d) for d in n.attr("dilations", [1] * spatial)]
    extra = [int(p) for p in n.attr("output_padding", [0] * spatial)]
    pads = [int(p) for p in n.attr("pads", [0] * 2 * spatial)]
    auto = n.attr("auto_pad", "NOTSET")
    wanted = n.attr("output_shape")
    if auto in ("SAME_UPPER", "SAME_LOWER") and wanted is None:
        wanted = [size * s for size, s in zip(t.shape[2:], strides, strict=True)]
    if wanted is not None:  # padding that gives the asked size
        wanted = [int(v) for v in wanted][-spatial:]
        for i in range(spatial):
            full = strides[i] * (t.shape[2 + i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + 1
            total = full - wanted[i]
            small, big = total // 2, total - total // 2
            pads[i], pads[spatial + i] = (small, big) if auto == "SAME_UPPER" else (big, small)
    x, weight = n.x(0), n.x(1)
    size = tuple(t.shape[2:])
    if spatial == 1:  # lift to 2-D with a height of 1
        x, weight = op.expand_dims(x, axis=2), op.expand_dims(weight, axis=2)
        kernel, strides, dilations, extra = (
            [1, *kernel],
            [1, *strides],
            [1, *dilations],
            [0, *extra],
        )
        pads, size = [0, pads[0], 0, pads[1]], (1, *size)
    dims = len(size)
    axes = tuple(range(2, 2 + dims))
    x = _spread_pixels(x, (t.shape[0], t.shape[1], *size), strides)
    padding, crop_begin, crop_end = [], [], []
    for i in range(dims):
        reach = dilations[i] * (kernel[i] - 1)
        begin, end = reach - pads[i], reach - pads[dims + i] + extra[i]
        padding.append((max(begin, 0), max(end, 0)))
        crop_begin.append(max(-begin, 0))
        crop_end.append(max(-end, 0))
    if any(crop_begin) or any(crop_end):
        spread = [(size[i] - 1) * strides[i] + 1 for i in range(dims)]
        x = op.strided_slice(
            x,
            begin=tuple(crop_begin),
            end=tuple(spread[i] - crop_end[i] for i in range(dims)),
            axes=axes,
        )
    c_in, c_out_group = w.shape[0], w.shape[1]
    flipped = _flipped_kernel(weight, groups, c_in, c_out_group, kernel)
    befores, afters = tuple(p[0] for p in padding), tuple(p[1] for p in padding)
    if dims == 3:
        x_type = TensorType((t.shape[0], t.shape[1], *static_shape(x)[2:]), t.dtype)
        w_type = TensorType((groups * c_out_group, c_in // groups, *kernel), w.dtype)
        depth = Depth(x_type, tuple(kernel), (1, 1, 1), tuple(dilations), befores + afters)
        out = conv3d_of(x, flipped, depth, w_type, groups)
    else:
        out = op.conv2d(
            x, flipped, padding=befores + afters, dilation=tuple(dilations), groups=groups
        )
    bias = n.input(2)
    if bias is not None:
        out = op.bias_add(out, bias, axis=1)
    return op.squeeze(out, axis=(2,)) if spatial == 1 else out


def _flipped_kernel(
    weight: Expr, groups: int, c_in: int, c_out_group: int, kernel: list[int]
) -> Expr:
    """A transposed convolution's kernel as a direct one's: in and out channels swapped per
    group, every spatial axis reversed."""
    dims = len(kernel)
    flipped = op.reshape(weight, (groups, c_in // groups, c_out_group, *kernel))
    flipped = op.reshape(
        op.transpose(flipped, axes=(0, 2, 1, *range(3, 3 + dims))),
        (groups * c_out_group, c_in // groups, *kernel),
    )
    return op.strided_slice(
        flipped,
        begin=tuple(k - 1 for k in kernel),
        end=tuple(-k - 1 for k in kernel),
        strides=(-1,) * dims,
        axes=tuple(range(2, 2 + dims)),
    )


def _spread_pixels(x: Expr, shape: tuple[int, ...], strides: list[int]) -> Expr:
    """stride - 1 zeros between neighbouring pixels: (N, C, H, W) as (N, C, H, 1, W, 1),
    padded to (N, C, H, sh, W, sw), reshaped to (N, C, H*sh, W*sw), the tail cut (and
    the same over three axes)."""
    if all(s == 1 for s in strides):
        return x
    batch, channels, *size = shape
    grid = op.reshape(x, (batch, channels, *(d for side in size for d in (side, 1))))
    width = ((0, 0), (0, 0), *(w for s in strides for w in ((0, 0), (0, s - 1))))
    padded = op.pad(grid, pad_width=width)
    spread = tuple(d * s for d, s in zip(size, strides, strict=True))
    flat = op.reshape(padded, (batch, channels, *spread))
    return op.strided_slice(
        flat,
        begin=(0,) * len(size),
        end=tuple((d - 1) * s + 1 for d, s in zip(size, strides, strict=True)),
        axes=tuple(range(2, 2 + len(size))),
    )
