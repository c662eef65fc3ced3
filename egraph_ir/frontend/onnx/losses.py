"""ONNX converters for the classification losses: NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss, as compositions (gather the target's class, weight, mask the
ignored samples, reduce)."""

from __future__ import annotations

import numpy as np

from ... import op
from ...errors import FrontendError
from ...expr import Constant, Expr
from .node import Node, converter

REDUCTIONS = ("none", "sum", "mean")


def nll_loss(n: Node, log_prob: Expr, dtype: str, target: Expr, weight: Expr | None) -> Expr:
    """loss[n, d..] = -log_prob[n, target[n, d..], d..] * weight[target[n, d..]], zero
    where the target is ignore_index; "mean" divides by the summed weights of the samples
    kept (their count without weights), as ONNX's definition."""
    reduction = n.attr("reduction", "mean")
    if reduction not in REDUCTIONS:
        raise FrontendError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    ignore = n.attr("ignore_index")

    def scalar(value: float | int, kind: str = dtype) -> Expr:
        return Constant(np.asarray(value, dtype=kind))

    target_dtype = n.type(1).dtype
    kept = None if ignore is None else op.not_equal(target, scalar(ignore, target_dtype))
    if kept is not None:  # an ignored target may be out of range: gather class 0 instead
        target = op.where(kept, target, scalar(0, target_dtype))
    picked = op.gather_elements(log_prob, op.expand_dims(target, axis=1), axis=1, mode="fast")
    loss = op.negative(op.squeeze(picked, axis=(1,)))
    w = None if weight is None else op.take(weight, target, axis=0, mode="fast")
    if kept is not None:
        mask = op.cast(kept, dtype=dtype)
        w = mask if w is None else op.multiply(w, mask)
    if w is not None:
        loss = op.multiply(loss, w)
    if reduction == "none":
        return loss
    total = op.sum(loss)
    if reduction == "sum":
        return total
    return op.mean(loss) if w is None else op.divide(total, op.sum(w))


@converter("NegativeLogLikelihoodLoss")
def _nll(n: Node) -> Expr:
    t = n.type(0)
    if t.ndim < 2:
        raise FrontendError(f"input must be (N, C, ...), got {t}")
    return nll_loss(n, n.x(0), t.dtype, n.x(1), n.input(2))


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(n: Node) -> list[Expr]:
    t = n.type(0)
    if t.ndim < 2:
        raise FrontendError(f"scores must be (N, C, ...), got {t}")
    log_prob = op.log_softmax(n.x(0), axis=1)
    loss = nll_loss(n, log_prob, t.dtype, n.x(1), n.input(2))
    return [loss, log_prob][: len(n.proto.output)]
