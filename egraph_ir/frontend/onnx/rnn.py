"""ONNX LSTM, GRU and RNN, unrolled over the static sequence length into IR ops.

The input projection of every time step is one product (`X @ W^T + biases`, over the whole
sequence); each step then adds `H @ R^T` and applies the gates, exactly as the ONNX operator
definitions write them (gate orders: LSTM i, o, f, c; GRU z, r, h). Both directions,
initial states, peepholes, `clip`, `layout=1` (batch first), LSTM's `input_forget` and
GRU's `linear_before_reset` are handled, and constant `sequence_lens`: a step past a
sequence's length keeps its state and writes zeros to Y, as ONNX Runtime does. The default
activations are used; others (`activations=...`) are refused by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from .node import Node, converter

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {
    "LSTM": ["Sigmoid", "Tanh", "Tanh"],
    "GRU": ["Sigmoid", "Tanh"],
    "RNN": ["Tanh"],
}
ACTIVATIONS: dict[str, Callable[[Expr], Expr]] = {
    "Sigmoid": op.sigmoid,
    "Tanh": op.tanh,
    "Relu": op.relu,
}


@dataclass
class _Layer:
    """What every step of one direction needs."""

    kind: str
    hidden: int
    batch: int
    dtype: str
    clip: float | None
    acts: list[Callable[[Expr], Expr]]
    attrs: dict


def _slice(x: Expr, axis: int, start: int, stop: int) -> Expr:
    return op.strided_slice(x, begin=(start,), end=(stop,), axes=(axis,))


def _gates(x: Expr, count: int, hidden: int) -> list[Expr]:
    """The count gate blocks of the last axis, each `hidden` wide."""
    return [_slice(x, -1, k * hidden, (k + 1) * hidden) for k in range(count)]


def _clipped(layer: _Layer, x: Expr) -> Expr:
    if layer.clip is None:
        return x
    return op.clip(x, a_min=-layer.clip, a_max=layer.clip)


def _scalar(value: float, dtype: str) -> Expr:
    return Constant(np.asarray(value, dtype=dtype))


def _lstm_step(
    layer: _Layer, xw: Expr, h: Expr, c: Expr, r: Expr, peep: list[Expr] | None
) -> tuple[Expr, Expr]:
    f, g, k = layer.acts
    hidden = layer.hidden
    i_, o_, f_, c_ = _gates(op.add(xw, op.dense(h, r)), 4, hidden)
    if peep is not None:
        i_, f_ = op.add(i_, op.multiply(peep[0], c)), op.add(f_, op.multiply(peep[2], c))
    i = f(_clipped(layer, i_))
    forget = (
        op.subtract(_scalar(1.0, layer.dtype), i)
        if layer.attrs.get("input_forget", 0)
        else f(_clipped(layer, f_))
    )
    new_c = op.add(op.multiply(forget, c), op.multiply(i, g(_clipped(layer, c_))))
    if peep is not None:
        o_ = op.add(o_, op.multiply(peep[1], new_c))
    new_h = op.multiply(f(_clipped(layer, o_)), k(new_c))
    return new_h, new_c


def _gru_step(
    layer: _Layer, xw: Expr, h: Expr, weights: tuple[Expr, Expr, Expr], h_bias: Expr | None
) -> Expr:
    """One GRU step; `weights` are R's z, r and h blocks, `h_bias` the h gate's recurrent
    bias (the z and r ones are folded into the input projection)."""
    f, g = layer.acts
    xz, xr, xh = _gates(xw, 3, layer.hidden)
    r_z, r_r, r_h = weights

    def recur(weight: Expr, bias: Expr | None, state: Expr) -> Expr:
        out = op.dense(state, weight)
        return out if bias is None else op.add(out, bias)

    z = f(_clipped(layer, op.add(xz, recur(r_z, None, h))))
    reset = f(_clipped(layer, op.add(xr, recur(r_r, None, h))))
    if layer.attrs.get("linear_before_reset", 0):
        candidate = op.add(xh, op.multiply(reset, recur(r_h, h_bias, h)))
    else:
        candidate = op.add(xh, recur(r_h, h_bias, op.multiply(reset, h)))
    h_new = g(_clipped(layer, candidate))
    one = _scalar(1.0, layer.dtype)
    return op.add(op.multiply(op.subtract(one, z), h_new), op.multiply(z, h))


def _initial(n: Node, index: int, d: int, layer: _Layer) -> Expr:
    """Direction d's initial state (input `index`: initial_h or initial_c), zeros if absent."""
    value = n.input(index)
    if value is None:
        return Constant(np.zeros((layer.batch, layer.hidden), dtype=layer.dtype))
    axis = 1 if n.attr("layout", 0) == 1 else 0  # [batch, dirs, hidden] or [dirs, batch, ...]
    state = _slice(value, axis, d, d + 1)
    return op.reshape(state, newshape=(layer.batch, layer.hidden))


def _direction(
    n: Node,
    layer: _Layer,
    x: Expr,
    seq: int,
    d: int,
    w: np.ndarray,
    r: np.ndarray,
    b: np.ndarray | None,
    lens: np.ndarray | None,
    reverse: bool,
) -> tuple[Expr, Expr, Expr | None]:
    """One direction unrolled: (Y as [seq, batch, hidden], last H, last C or None)."""
    hidden, gates, dtype = layer.hidden, GATES[layer.kind], layer.dtype
    xw = op.dense(x, Constant(np.ascontiguousarray(w)))  # [seq, batch, gates * hidden]
    h_bias = None
    if b is not None:
        wb, rb = b[: gates * hidden], b[gates * hidden :]
        if layer.kind == "GRU":  # the h gate's recurrent bias sits inside the reset product
            input_bias = wb + np.concatenate([rb[: 2 * hidden], np.zeros(hidden, rb.dtype)])
            h_bias = Constant(np.ascontiguousarray(rb[2 * hidden :]))
        else:
            input_bias = wb + rb
        xw = op.add(xw, Constant(input_bias.astype(dtype)))
    rc = Constant(np.ascontiguousarray(r))
    blocks = (  # GRU: R's z, r and h blocks, sliced once for every step
        Constant(np.ascontiguousarray(r[:hidden])),
        Constant(np.ascontiguousarray(r[hidden : 2 * hidden])),
        Constant(np.ascontiguousarray(r[2 * hidden : 3 * hidden])),
    )
    peep: list[Expr] | None = None
    if layer.kind == "LSTM" and n.input(7) is not None:
        p = n.const(7)[d]
        peep = [Constant(np.ascontiguousarray(p[k * hidden : (k + 1) * hidden])) for k in range(3)]
    h = _initial(n, 5, d, layer)
    c = _initial(n, 6, d, layer) if layer.kind == "LSTM" else None
    zeros = Constant(np.zeros((layer.batch, hidden), dtype=dtype))
    ys: list[Expr] = [zeros] * seq
    for t in reversed(range(seq)) if reverse else range(seq):
        step = op.reshape(_slice(xw, 0, t, t + 1), newshape=(layer.batch, gates * hidden))
        if layer.kind == "LSTM":
            assert c is not None
            new_h, new_c = _lstm_step(layer, step, h, c, rc, peep)
        elif layer.kind == "GRU":
            new_h, new_c = _gru_step(layer, step, h, blocks, h_bias), None
        else:
            new_h, new_c = layer.acts[0](_clipped(layer, op.add(step, op.dense(h, rc)))), None
        if lens is not None:  # past a sequence's end: the state stays, Y is zero
            live = Constant((t < lens).reshape(-1, 1))
            ys[t] = op.where(live, new_h, zeros)
            new_h = op.where(live, new_h, h)
            new_c = op.where(live, new_c, c) if new_c is not None and c is not None else new_c
        else:
            ys[t] = new_h
        h, c = new_h, new_c
    y = op.concatenate(*(op.expand_dims(v, axis=0) for v in ys), axis=0)
    return y, h, c


@converter("LSTM", "GRU", "RNN")
def _recurrent(n: Node) -> list[Expr]:
    kind = n.op_type
    gates = GATES[kind]
    layout = int(n.attr("layout", 0))
    x = n.x(0)
    if layout == 1:  # [batch, seq, input] -> [seq, batch, input]
        x = op.transpose(x, axes=(1, 0, 2))
    xt = n.type(0)
    seq, batch = (xt.shape[1], xt.shape[0]) if layout == 1 else (xt.shape[0], xt.shape[1])
    w, r = n.const(1), n.const(2)
    if w is None or r is None:
        raise FrontendError("the weights W and R must be constants")
    hidden = int(n.attr("hidden_size", r.shape[-1]))
    direction = n.attr("direction", "forward")
    dirs = 2 if direction == "bidirectional" else 1
    if (
        w.shape[0] != dirs
        or w.shape[1] != gates * hidden
        or r.shape[1:] != (gates * hidden, hidden)
    ):
        raise FrontendError(
            f"W {list(w.shape)} and R {list(r.shape)} do not fit {dirs} direction(s) of "
            f"{gates} gate(s) with hidden_size {hidden}"
        )
    names = n.attr("activations")
    if names is not None:
        names = [str(a) for a in names]
        if names != DEFAULT_ACTIVATIONS[kind] * dirs:
            unknown = [a for a in names if a not in ACTIVATIONS]
            if unknown or len(names) != len(DEFAULT_ACTIVATIONS[kind]) * dirs:
                raise FrontendError(f"activations {names} are not supported")
    dtype = xt.dtype
    b = n.const(3)
    lens = n.const(4)
    if lens is not None:
        lens = np.asarray(lens).reshape(-1)
        if lens.shape != (batch,) or np.any(lens > seq) or np.any(lens < 0):
            raise FrontendError(f"sequence_lens {lens.tolist()} do not fit {batch} x {seq}")
        if np.all(lens == seq):
            lens = None
    clip = n.attr("clip")
    y_dirs, h_dirs, c_dirs = [], [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        if reverse and lens is not None:
            raise FrontendError("reverse directions with varying sequence_lens are not supported")
        per = len(DEFAULT_ACTIVATIONS[kind])
        chosen = names[d * per : (d + 1) * per] if names else DEFAULT_ACTIVATIONS[kind]
        acts = [ACTIVATIONS[a] for a in chosen]
        bound = None if clip is None else float(clip)
        layer = _Layer(kind, hidden, batch, dtype, bound, acts, n.attrs)
        bias = None if b is None else b[d]
        ys, h, c = _direction(n, layer, x, seq, d, w[d], r[d], bias, lens, reverse)
        y_dirs.append(ys)
        h_dirs.append(h)
        if c is not None:
            c_dirs.append(c)
    # Y [seq, dirs, batch, hidden]; Y_h, Y_c [dirs, batch, hidden]
    y = op.concatenate(*(op.expand_dims(v, axis=1) for v in y_dirs), axis=1)
    y_h = op.concatenate(*(op.expand_dims(v, axis=0) for v in h_dirs), axis=0)
    outs: list[Expr] = [y, y_h]
    if kind == "LSTM":
        outs.append(op.concatenate(*(op.expand_dims(v, axis=0) for v in c_dirs), axis=0))
    if layout == 1:
        outs[0] = op.transpose(outs[0], axes=(2, 0, 1, 3))
        outs[1:] = [op.transpose(v, axes=(1, 0, 2)) for v in outs[1:]]
    return outs
