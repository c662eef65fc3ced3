"""Blocked layouts: `layout_transform` between layout strings and `conv2d_nchwc`, the
convolution on channel-blocked data (TVM's layout_transform and contrib_conv2d_NCHWc).

A layout string names a tensor's axes in order: an upper-case letter is a primal axis
(N, C, H, W, ...), a number and a lower-case letter a sub-axis that splits the primal
axis of the same letter: "NCHW16c" is (N, C/16, H, W, 16), element (n, c, h, w) at
[n, c // 16, h, w, c % 16]. Blocked layouts keep a vector of channels contiguous, so a
depthwise convolution or a pooling over them is one vector operation per tap; the rules
in rules/builtin/blocked.rules decide where a graph converts, and the extraction weighs
the conversions' cost against the kernels'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from ..attrs import Attrs
from ..registry import AttrSpec, OpPattern, ShapeError, get_op
from ..types import FLOAT_DTYPES, TensorType, Type
from ._common import register_anchor, require_dtype, same_dtype, size_of
from .nn import CONV_ATTRS, conv2d_ref, conv_geometry
from .qnn import PAIRS, qnn_conv2d_ref

LayoutAxes = tuple[tuple[str, int], ...]  # (letter, factor): factor 0 for a primal axis
_ITEM = re.compile(r"([A-Z])|([1-9][0-9]*)([a-z])")


@cache
def parse_layout(layout: str) -> LayoutAxes:
    """'NCHW16c' -> (('N', 0), ('C', 0), ('H', 0), ('W', 0), ('c', 16)); a ShapeError
    names what is wrong with a malformed string."""
    items, at = [], 0
    while at < len(layout):
        m = _ITEM.match(layout, at)
        if m is None:
            raise ShapeError(f"layout {layout!r}: cannot read {layout[at:]!r}")
        items.append((m.group(1), 0) if m.group(1) else (m.group(3), int(m.group(2))))
        at = m.end()
    letters = [letter for letter, _ in items]
    if len(set(letters)) != len(letters):
        raise ShapeError(f"layout {layout!r} names an axis twice")
    for letter, factor in items:
        if factor and letter.upper() not in letters:
            raise ShapeError(f"layout {layout!r}: sub-axis {letter} without axis {letter.upper()}")
    return tuple(items)


def split_factor(axes: LayoutAxes, primal: str) -> int:
    """The factor primal axis `primal` is split by in a parsed layout (1: not split)."""
    return next((f for letter, f in axes if letter == primal.lower() and f), 1)


def primal_extents(shape: tuple[int, ...], layout: str) -> dict[str, int]:
    """The size of every primal axis of a tensor of `shape` in `layout`."""
    axes = parse_layout(layout)
    if len(shape) != len(axes):
        raise ShapeError(f"layout {layout!r} has {len(axes)} axes, the tensor {shape}")
    for (letter, factor), dim in zip(axes, shape, strict=True):
        if factor and dim != factor:
            raise ShapeError(f"layout {layout!r}: axis {letter} must be {factor}, got {dim}")
    return {
        letter: dim * split_factor(axes, letter)
        for (letter, factor), dim in zip(axes, shape, strict=True)
        if not factor
    }


def layout_shape(extents: dict[str, int], layout: str) -> tuple[int, ...]:
    """The shape of a tensor of primal `extents` in `layout` (each split axis whole)."""
    axes = parse_layout(layout)
    if sorted(letter for letter, f in axes if not f) != sorted(extents):
        raise ShapeError(f"layout {layout!r} does not have the axes {''.join(extents)}")
    shape = []
    for letter, factor in axes:
        if factor:
            shape.append(factor)
            continue
        split = split_factor(axes, letter)
        if extents[letter] % split:
            raise ShapeError(
                f"layout {layout!r}: axis {letter} of {extents[letter]} does not split by {split}"
            )
        shape.append(extents[letter] // split)
    return tuple(shape)


def _transform_infer(args: list[TensorType], attrs: Attrs) -> Type:
    (x,) = args
    extents = primal_extents(x.shape, attrs["src_layout"])
    return TensorType(layout_shape(extents, attrs["dst_layout"]), x.dtype)


Step = tuple[str, tuple[int, ...]]  # ("transpose", perm) or ("reshape", shape)


def transform_steps(shape: tuple[int, ...], src_layout: str, dst_layout: str) -> list[Step]:
    """The conversion as transposes and reshapes (the numpy reference and the ONNX export
    both run them): merge each split axis back into its primal axis, order the primal
    axes as the destination has them, split them as it does, order the pieces."""
    src, dst = parse_layout(src_layout), parse_layout(dst_layout)
    position = {letter: k for k, (letter, _) in enumerate(src)}
    order = [letter for letter, f in src if not f]
    merge = []
    for u in order:
        merge += [position[u]] + ([position[u.lower()]] if u.lower() in position else [])
    extents = primal_extents(shape, src_layout)
    dst_order = [letter for letter, f in dst if not f]
    split_shape, names = [], []
    for u in dst_order:
        f = split_factor(dst, u)
        split_shape += [extents[u] // f, f] if f > 1 else [extents[u]]
        names += [u, u.lower()] if f > 1 else [u]
    layout_shape(extents, dst_layout)  # a ShapeError when an axis does not split
    return [
        ("transpose", tuple(merge)),
        ("reshape", tuple(extents[u] for u in order)),
        ("transpose", tuple(order.index(u) for u in dst_order)),
        ("reshape", tuple(split_shape)),
        ("transpose", tuple(names.index(letter) for letter, _ in dst)),
    ]


def layout_transform_ref(x: np.ndarray, src_layout: str, dst_layout: str) -> np.ndarray:
    for kind, value in transform_steps(x.shape, src_layout, dst_layout):
        x = x.transpose(value) if kind == "transpose" else x.reshape(value)
    return np.ascontiguousarray(x)


def _transform_bytes(args: list[TensorType], out: Type, attrs: Attrs) -> float:
    """No arithmetic: the cost models price the bytes it moves (one read, one write)."""
    return 0.0


register_anchor(
    "layout_transform",
    ("data",),
    _transform_infer,
    layout_transform_ref,
    _transform_bytes,
    (AttrSpec("src_layout", "str"), AttrSpec("dst_layout", "str")),
    OpPattern.INJECTIVE,
    doc="the same tensor in another layout: 'NCHW' <-> 'NCHW16c' (channel blocks of 16)",
)


# ---------------------------------------------------------------- conv2d on blocked data
def channel_block(layout: str) -> int:
    """The channel block of an 'NCHW<b>c' layout, 1 for 'NCHW'; others are a ShapeError."""
    axes = parse_layout(layout)
    letters = [letter for letter, _ in axes]
    if letters == ["N", "C", "H", "W"]:
        return 1
    if letters != ["N", "C", "H", "W", "c"]:
        raise ShapeError(f"conv2d_nchwc takes layouts NCHW and NCHW<b>c, got {layout!r}")
    return axes[4][1]


def _nchwc_infer(args: list[TensorType], attrs: Mapping[str, Any]) -> Type:
    dtype = same_dtype(args)
    require_dtype(args[0], FLOAT_DTYPES)
    data, out = attrs["data_layout"], attrs["out_layout"]
    for layout in (data, out):
        channel_block(layout)  # a ShapeError names a layout the op does not take
    x, w = args[0].shape, args[1].shape
    extents = primal_extents(x, data)
    plain = tuple(extents[a] for a in "NCHW")
    if len(w) != 4:
        raise ShapeError(f"conv2d_nchwc needs OIHW weight, got {w}")
    (n, o, oh, ow), *_ = conv_geometry(plain, w, attrs)
    return TensorType(layout_shape({"N": n, "C": o, "H": oh, "W": ow}, out), dtype)


def conv2d_nchwc_ref(x, w, strides, padding, dilation, groups, data_layout, out_layout):
    plain = layout_transform_ref(x, data_layout, "NCHW")
    out = conv2d_ref(plain, w, strides, padding, dilation, groups)
    return layout_transform_ref(out, "NCHW", out_layout)


register_anchor(
    "conv2d_nchwc",
    ("data", "weight"),
    _nchwc_infer,
    conv2d_nchwc_ref,
    lambda a, out, at: 2.0 * size_of(out.shape) * size_of(a[1].shape[1:]),
    (
        *CONV_ATTRS,
        AttrSpec("data_layout", "str", "NCHW16c"),
        AttrSpec("out_layout", "str", "NCHW16c"),
    ),
    doc="conv2d reading data in data_layout and writing out_layout (NCHW or NCHW<b>c), "
    "OIHW weight: the blocked kernels' op",
)


# ---------------------------------------------------------------- qnn_conv2d on blocked data
def _qnn_nchwc_infer(args: list[TensorType], attrs: Mapping[str, Any]) -> Type:
    data, weight, data_zero, weight_zero = args
    data_layout, out_layout = attrs["data_layout"], attrs["out_layout"]
    for layout in (data_layout, out_layout):
        channel_block(layout)
    extents = primal_extents(data.shape, data_layout)
    plain = TensorType(tuple(extents[a] for a in "NCHW"), data.dtype)
    conv_attrs = Attrs({k: v for k, v in attrs.items() if k not in ("data_layout", "out_layout")})
    out = get_op("qnn_conv2d").infer([plain, weight, data_zero, weight_zero], conv_attrs)
    assert isinstance(out, TensorType)
    n, o, oh, ow = out.shape
    return TensorType(layout_shape({"N": n, "C": o, "H": oh, "W": ow}, out_layout), "int32")


def qnn_conv2d_nchwc_ref(
    x, w, x_zero, w_zero, strides, padding, dilation, groups, pairs, data_layout, out_layout
):
    plain = layout_transform_ref(x, data_layout, "NCHW")
    out = qnn_conv2d_ref(plain, w, x_zero, w_zero, strides, padding, dilation, groups, pairs)
    return layout_transform_ref(out, "NCHW", out_layout)


register_anchor(
    "qnn_conv2d_nchwc",
    ("data", "weight", "data_zero_point", "weight_zero_point"),
    _qnn_nchwc_infer,
    qnn_conv2d_nchwc_ref,
    lambda a, out, at: 2.0 * size_of(out.shape) * size_of(a[1].shape[1:]),
    (
        *CONV_ATTRS,
        PAIRS,
        AttrSpec("data_layout", "str", "NCHW16c"),
        AttrSpec("out_layout", "str", "NCHW16c"),
    ),
    doc="qnn_conv2d reading data in data_layout and writing its int32 sums in out_layout "
    "(NCHW or NCHW<b>c), OIHW weight: the blocked int8 kernels' op",
)


# ---------------------------------------------------------------- Winograd's 3x3 convolution
WINOGRAD_FIXED = {"strides": (1, 1), "dilation": (1, 1), "groups": 1}


def _winograd_infer(args: list[TensorType], attrs: Attrs) -> Type:
    w = args[1].shape
    if len(w) != 4 or w[2:] != (3, 3):
        raise ShapeError(f"conv2d_winograd takes a 3x3 OIHW weight, got {w}")
    if attrs["tile_size"] not in (2, 4):
        raise ShapeError(
            f"conv2d_winograd tiles 2x2 or 4x4 outputs, not tile_size={attrs['tile_size']}"
        )
    return _nchwc_infer(args, {**attrs, **WINOGRAD_FIXED})


def conv2d_winograd_ref(x, w, padding, data_layout, out_layout, tile_size):
    return conv2d_nchwc_ref(x, w, (1, 1), padding, (1, 1), 1, data_layout, out_layout)


register_anchor(
    "conv2d_winograd",
    ("data", "weight"),
    _winograd_infer,
    conv2d_winograd_ref,
    lambda a, out, at: 2.0 * size_of(out.shape) * size_of(a[1].shape[1:]),
    (
        AttrSpec("padding", "ints", (1, 1, 1, 1)),
        AttrSpec("data_layout", "str", "NCHW16c"),
        AttrSpec("out_layout", "str", "NCHW16c"),
        AttrSpec("tile_size", "int", 2),
    ),
    doc="a 3x3 convolution of stride 1, one group, computed by Winograd's minimal "
    "filtering F(m x m, 3x3) with m = tile_size (2 or 4): what conv2d_nchwc computes, up "
    "to rounding; its FLOPs are the direct convolution's, so rates compare",
)


# ---------------------------------------------------------------- im2col columns
def _columns_geometry(shape: tuple[int, ...], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    """(N, C, OH, OW, KH, KW) of im2col's input shape and attributes."""
    kh, kw = attrs["kernel_size"]
    geometry = dict(attrs, groups=1)
    (n, _, oh, ow), *_ = conv_geometry(shape, (1, shape[1], kh, kw), geometry)
    return n, shape[1], oh, ow, kh, kw


def _im2col_infer(args: list[TensorType], attrs: Mapping[str, Any]) -> Type:
    (x,) = args
    if x.ndim != 4:
        raise ShapeError(f"im2col takes NCHW data, got {x.shape}")
    n, c, oh, ow, kh, kw = _columns_geometry(x.shape, attrs)
    return TensorType((n * oh * ow, kh, kw, c), x.dtype)


def im2col_ref(x, kernel_size, strides, padding, dilation, pad_value):
    """Row (n, oy, ox): the window's values, (kernel row, column, channel) (MLAS's NHWC
    im2col: reshaped to (rows, KH * KW * C), a product's depth), padding `pad_value`."""
    attrs = dict(kernel_size=kernel_size, strides=strides, padding=padding, dilation=dilation)
    n, c, oh, ow, kh, kw = _columns_geometry(x.shape, attrs)
    _, (pt, pl, pb, pr), (sh, sw), (dh, dw) = conv_geometry(
        x.shape, (1, c, kh, kw), dict(attrs, groups=1)
    )
    fill = np.asarray(pad_value).astype(x.dtype)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    taps = [
        xp[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]
    columns = np.stack(taps, axis=-1).transpose(0, 2, 3, 4, 1)  # (N, OH, OW, taps, C)
    return np.ascontiguousarray(columns).reshape(n * oh * ow, kh, kw, c)


register_anchor(
    "im2col",
    ("data",),
    _im2col_infer,
    im2col_ref,
    _transform_bytes,
    (AttrSpec("kernel_size", "ints"), *CONV_ATTRS[:3], AttrSpec("pad_value", "float", 0.0)),
    OpPattern.INJECTIVE,
    doc="a convolution's windows as rows (N * OH * OW, KH, KW, C): MLAS's NHWC im2col; "
    "padding reads pad_value",
)
