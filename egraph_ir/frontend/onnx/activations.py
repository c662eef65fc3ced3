"""Converters of activations and normalised exponentials: Relu's relatives (LeakyRelu,
Elu, Selu, Celu, PRelu, HardSigmoid, HardSwish, Swish, Softplus, Softsign, Mish,
ThresholdedRelu, Shrink), Gelu, Softmax, LogSoftmax and Hardmax, as registry ops or their
compositions."""

from __future__ import annotations

import numpy as np

from ... import op
from ...expr import Constant, Expr
from .node import Node, converter, scalar_like


@converter("LeakyRelu")
def _leaky_relu(n: Node) -> Expr:
    return op.leaky_relu(n.x(), alpha=float(n.attr("alpha", 0.01)))


@converter("Gelu")
def _gelu(n: Node) -> Expr:
    return op.gelu(n.x(), approximate=n.attr("approximate", "none"))


@converter("Softmax", "LogSoftmax")
def _softmax(n: Node) -> Expr:
    name = "softmax" if n.op_type == "Softmax" else "log_softmax"
    return op.call(name, n.x(), axis=int(n.attr("axis", -1)))


@converter("Hardmax")
def _hardmax(n: Node) -> Expr:
    t = n.type()
    axis = int(n.attr("axis", -1)) % max(t.ndim, 1)
    first = op.argmax(n.x(), axis=axis, keepdims=True)  # the first maximum, as ONNX wants
    shape = [1] * t.ndim
    shape[axis] = t.shape[axis]
    positions = Constant(np.arange(t.shape[axis], dtype=np.int64).reshape(shape))
    return op.cast(op.equal(positions, first), dtype=t.dtype)


# ---------------------------------------------------------------- activations as formulas


def _exp_minus_one(x: Expr, n: Node) -> Expr:
    return op.subtract(op.exp(x), scalar_like(n, 1.0))


@converter("Elu", "Selu", "Celu")
def _elu_family(n: Node) -> Expr:
    x = n.x()
    if n.op_type == "Celu":  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
        alpha = float(n.attr("alpha", 1.0))
        neg = op.multiply(
            scalar_like(n, alpha), _exp_minus_one(op.divide(x, scalar_like(n, alpha)), n)
        )
        return op.add(op.maximum(x, scalar_like(n, 0.0)), op.minimum(neg, scalar_like(n, 0.0)))
    default_alpha = 1.0 if n.op_type == "Elu" else 1.67326319217681884765625
    alpha = float(n.attr("alpha", default_alpha))
    neg = op.multiply(scalar_like(n, alpha), _exp_minus_one(x, n))
    out = op.where(op.less(x, scalar_like(n, 0.0)), neg, x)
    if n.op_type == "Selu":
        out = op.multiply(scalar_like(n, float(n.attr("gamma", 1.05070102214813232421875))), out)
    return out


@converter("HardSigmoid", "HardSwish")
def _hard_sigmoid(n: Node) -> Expr:
    x = n.x()
    alpha = float(n.attr("alpha", 0.2 if n.op_type == "HardSigmoid" else 1 / 6))
    beta = float(n.attr("beta", 0.5))
    gate = op.clip(
        op.add(op.multiply(x, scalar_like(n, alpha)), scalar_like(n, beta)), a_min=0.0, a_max=1.0
    )
    return gate if n.op_type == "HardSigmoid" else op.multiply(x, gate)


@converter("Swish")
def _swish(n: Node) -> Expr:
    x = n.x()
    return op.multiply(x, op.sigmoid(op.multiply(x, scalar_like(n, float(n.attr("alpha", 1.0))))))


def _softplus(x: Expr, n: Node) -> Expr:
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))
    tail = op.log(op.add(scalar_like(n, 1.0), op.exp(op.negative(op.abs(x)))))
    return op.add(op.maximum(x, scalar_like(n, 0.0)), tail)


@converter("Softplus", "Softsign", "Mish")
def _soft(n: Node) -> Expr:
    x = n.x()
    if n.op_type == "Softplus":
        return _softplus(x, n)
    if n.op_type == "Softsign":
        return op.divide(x, op.add(scalar_like(n, 1.0), op.abs(x)))
    return op.multiply(x, op.tanh(_softplus(x, n)))


@converter("ThresholdedRelu")
def _thresholded_relu(n: Node) -> Expr:
    x = n.x()
    return op.where(
        op.greater(x, scalar_like(n, float(n.attr("alpha", 1.0)))), x, scalar_like(n, 0.0)
    )


@converter("PRelu")
def _prelu(n: Node) -> Expr:
    x, slope = n.x(0), n.x(1)
    return op.where(op.less(x, scalar_like(n, 0.0)), op.multiply(x, slope), x)


@converter("Shrink")
def _shrink(n: Node) -> Expr:
    x = n.x()
    bias, lambd = float(n.attr("bias", 0.0)), float(n.attr("lambd", 0.5))
    low = op.where(
        op.less(x, scalar_like(n, -lambd)), op.add(x, scalar_like(n, bias)), scalar_like(n, 0.0)
    )
    return op.where(op.greater(x, scalar_like(n, lambd)), op.subtract(x, scalar_like(n, bias)), low)
