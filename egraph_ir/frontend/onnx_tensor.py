"""ONNX converters built from existing ops (Tile, EyeLike, OneHot, LpNormalization,
InstanceNormalization, LRN, LpPool, GatherND, ReverseSequence) and the converters of
ScatterElements, ScatterND, TopK and Einsum (ops of egraph_ir/op/select.py)."""

from __future__ import annotations

import numpy as np

from .. import op
from ..errors import FrontendError
from ..expr import Constant, Expr, TupleGetItem
from ..types import TensorType
from .onnx import _Node, _pads, _Window, converter
from .onnx_volume import _Depth, _shape, conv3d_of, covered, pool3d


def _scalar(value: float | int, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=dtype))


@converter("Tile")
def _tile(n: _Node) -> Expr:
    """x (a, b) tiled (r, s): x as (1, a, 1, b), broadcast to (r, a, s, b), reshaped."""
    t = n.type()
    repeats = [int(r) for r in np.asarray(n.const(1)).reshape(-1)]
    if len(repeats) != t.ndim or any(r < 0 for r in repeats):
        raise FrontendError(f"repeats {repeats} must give one count >= 0 per axis of {t}")
    spread = tuple(d for size in t.shape for d in (1, size))
    target = tuple(d for r, size in zip(repeats, t.shape, strict=True) for d in (r, size))
    tiled = op.broadcast_to(op.reshape(n.x(), spread), target)
    return op.reshape(tiled, tuple(r * size for r, size in zip(repeats, t.shape, strict=True)))


@converter("EyeLike")
def _eye_like(n: _Node) -> Expr:
    t = n.type()
    if t.ndim != 2:
        raise FrontendError(f"EyeLike takes a 2-D input, got {t}")
    code = n.attr("dtype")
    dtype = str(n.importer.onnx.helper.tensor_dtype_to_np_dtype(code)) if code else t.dtype
    rows, cols = t.shape
    return Constant(np.eye(rows, cols, k=int(n.attr("k", 0)), dtype=np.dtype(dtype)))


@converter("OneHot")
def _one_hot(n: _Node) -> Expr:
    """values[1] where the (wrapped) index equals the position along the new axis, else
    values[0]."""
    t = n.type(0)
    depth = int(np.asarray(n.const(1)).reshape(-1)[0])
    values = n.x(2)
    axis = int(n.attr("axis", -1)) % (t.ndim + 1)
    index = n.x(0)
    wrapped = op.where(
        op.less(index, _scalar(0, t.dtype)), op.add(index, _scalar(depth, t.dtype)), index
    )
    shape = [1] * (t.ndim + 1)
    shape[axis] = depth
    positions = Constant(np.arange(depth, dtype=t.dtype).reshape(shape))
    hit = op.equal(op.expand_dims(wrapped, axis=axis), positions)
    off = op.take(values, Constant(np.asarray(0, np.int64)), axis=0)
    on = op.take(values, Constant(np.asarray(1, np.int64)), axis=0)
    return op.where(hit, on, off)


@converter("LpNormalization")
def _lp_normalization(n: _Node) -> Expr:
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
    one, zero = _scalar(1, t.dtype), _scalar(0, t.dtype)
    return op.divide(x, op.where(op.equal(norm, zero), one, norm))


@converter("InstanceNormalization")
def _instance_norm(n: _Node) -> Expr:
    eps = float(n.attr("epsilon", 1e-5))
    return op.instance_norm(n.x(0), n.x(1), n.x(2), axis=1, epsilon=eps)


@converter("LRN")
def _lrn(n: _Node) -> Expr:
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
        _scalar(bias, t.dtype), op.multiply(op.reshape(window, t.shape), _scalar(alpha, t.dtype))
    )
    return op.divide(x, op.power(scale, _scalar(beta, t.dtype)))


@converter("LpPool")
def _lp_pool(n: _Node) -> Expr:
    """(sum over the window of |x|^p)^(1/p): an average pool of |x|^p over the input
    elements each window covers, times their number (padding adds nothing; windows of
    ceil mode reaching past the padding cover fewer elements than the kernel's size)."""
    t = n.type()
    p = float(n.attr("p", 2))
    powered = op.power(op.abs(n.x()), _scalar(p, t.dtype))
    if t.ndim == 5:
        kernel = tuple(n.attr("kernel_shape"))
        strides = tuple(n.attr("strides", [1] * 3))
        dilations = tuple(n.attr("dilations", [1] * 3))
        begins = _pads(n, t, kernel, strides, dilations)[:3]
        mean = pool3d(n, powered, include=False)
        sizes = t.shape[2:]
    else:
        win = _Window(n)
        mean = op.avg_pool2d(
            win.lift(powered), pool_size=win.kernel,
            strides=win.strides, padding=win.pads, dilation=win.dilations,
            ceil_mode=bool(n.attr("ceil_mode", 0)), count_include_pad=False,
        )  # fmt: skip
        kernel, strides, dilations, begins = win.kernel, win.strides, win.dilations, win.pads[:2]
        sizes = _shape(win.x)[2:]
    counts = covered(sizes, kernel, strides, dilations, begins, _shape(mean)[2:])
    total = op.multiply(mean, Constant(counts.astype(t.dtype)[None, None]))
    if not counts.all():  # a window wholly in padding averages nothing (NaN): its sum is 0
        total = op.where(Constant(counts[None, None] > 0), total, _scalar(0.0, t.dtype))
    out = op.power(total, _scalar(1.0 / p, t.dtype))
    return win.finish(out) if t.ndim != 5 else out


@converter("GatherND")
def _gather_nd(n: _Node) -> Expr:
    """data[batch..., index...]: each index tuple (and the batch position) becomes one
    offset into data flattened over the batch and indexed axes, then a take."""
    data_t, index_t = n.type(0), n.type(1)
    batch = int(n.attr("batch_dims", 0))
    k = index_t.shape[-1]
    lead = data_t.shape[: batch + k]
    strides = np.cumprod((*lead[1:], 1)[::-1])[::-1].astype(np.int64)
    index = op.cast(n.x(1), dtype="int64")
    dims = Constant(np.asarray(data_t.shape[batch : batch + k], np.int64))
    index = op.where(op.less(index, _scalar(0, "int64")), op.add(index, dims), index)
    offset = op.sum(op.multiply(index, Constant(strides[batch:])), axis=(-1,))
    if batch:  # the batch position of each index tuple
        grid = np.indices(index_t.shape[:batch]).astype(np.int64)
        base = sum(g * s for g, s in zip(grid, strides[:batch], strict=True))
        base = base.reshape(*index_t.shape[:batch], *[1] * (index_t.ndim - 1 - batch))
        offset = op.add(offset, Constant(np.asarray(base, np.int64)))
    flat = op.reshape(n.x(0), (int(np.prod(lead, dtype=np.int64)), *data_t.shape[batch + k :]))
    return op.take(flat, offset, axis=0, mode="fast")


@converter("ReverseSequence")
def _reverse_sequence(n: _Node) -> Expr:
    """Each batch entry's first `length` steps reversed: a gather along the time axis of
    index length - 1 - t where t < length, t elsewhere."""
    t = n.type(0)
    time_axis = int(n.attr("time_axis", 0))
    batch_axis = int(n.attr("batch_axis", 1))
    steps = t.shape[time_axis]
    shape = [1] * t.ndim
    shape[time_axis] = steps
    time = Constant(np.arange(steps, dtype=np.int64).reshape(shape))
    lens_shape = [1] * t.ndim
    lens_shape[batch_axis] = t.shape[batch_axis]
    lengths = op.reshape(op.cast(n.x(1), dtype="int64"), tuple(lens_shape))
    flipped = op.subtract(op.subtract(lengths, _scalar(1, "int64")), time)
    index = op.where(op.less(time, lengths), flipped, time)
    return op.gather_elements(n.x(0), op.broadcast_to(index, t.shape), axis=time_axis, mode="fast")


@converter("ScatterElements")
def _scatter_elements(n: _Node) -> Expr:
    return op.scatter_elements(
        n.x(0), n.x(1), n.x(2), axis=int(n.attr("axis", 0)), reduction=n.attr("reduction", "none")
    )


@converter("ScatterND")
def _scatter_nd(n: _Node) -> Expr:
    return op.scatter_nd(n.x(0), n.x(1), n.x(2), reduction=n.attr("reduction", "none"))


@converter("TopK")
def _topk(n: _Node) -> list[Expr]:
    k = int(np.asarray(n.const(1)).reshape(-1)[0])
    both = op.topk(
        n.x(0),
        k=k,
        axis=int(n.attr("axis", -1)),
        largest=bool(n.attr("largest", 1)),
        sorted=bool(n.attr("sorted", 1)),
    )
    return [TupleGetItem(both, 0), TupleGetItem(both, 1)]


@converter("Einsum")
def _einsum(n: _Node) -> Expr:
    return op.einsum(*n.inputs(), equation=n.attr("equation"))


@converter("ConvTranspose")
def _conv_transpose(n: _Node) -> Expr:
    """A transposed convolution as a direct one (which compiles natively): zeros between
    the input's pixels (stride - 1 of them), the kernel flipped with its in and out channels
    swapped per group, padding d * (k - 1) - pads (+ output_padding at the end). 1-D is
    lifted to 2-D; 3-D runs as the 3-D convolution (onnx_volume.py)."""
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
    flipped = op.reshape(weight, (groups, c_in // groups, c_out_group, *kernel))
    flipped = op.reshape(
        op.transpose(flipped, axes=(0, 2, 1, *range(3, 3 + dims))),
        (groups * c_out_group, c_in // groups, *kernel),
    )
    flipped = op.strided_slice(
        flipped,
        begin=tuple(k - 1 for k in kernel),
        end=tuple(-k - 1 for k in kernel),
        strides=(-1,) * dims,
        axes=axes,
    )
    befores, afters = tuple(p[0] for p in padding), tuple(p[1] for p in padding)
    if dims == 3:
        x_type = TensorType((t.shape[0], t.shape[1], *_shape(x)[2:]), t.dtype)
        w_type = TensorType((groups * c_out_group, c_in // groups, *kernel), w.dtype)
        depth = _Depth(x_type, tuple(kernel), (1, 1, 1), tuple(dilations), befores + afters)
        out = conv3d_of(x, flipped, depth, w_type, groups)
    else:
        out = op.conv2d(
            x, flipped, padding=befores + afters, dilation=tuple(dilations), groups=groups
        )
    bias = n.input(2)
    if bias is not None:
        out = op.bias_add(out, bias, axis=1)
    return op.squeeze(out, axis=(2,)) if spatial == 1 else out


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
