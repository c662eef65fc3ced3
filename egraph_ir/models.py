"""The built-in models, built in code with seeded weights.

They compute the same functions, with the same weights, as `shared/models/*.onnx` (opset 17,
float32): the generator seeds and the order of draws follow the script that wrote those
files, so `example_inputs(name)` is the exact input used there too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from . import op
from .errors import UnknownNameError, did_you_mean
from .expr import Constant, Expr, Function, TupleGetItem, Var, var
from .module import IRModule

NAMES = ("mlp", "cnn", "transformer", "elementwise")
GELU_C = math.sqrt(2.0 / math.pi)


def _normal(
    rng: np.random.Generator, shape: tuple[int, ...], scale: float | None = None
) -> np.ndarray:
    """N(0, 1) * scale in float32; the default scale is 1/sqrt(fan_in)."""
    if scale is None:
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:], dtype=np.int64))
        scale = 1.0 / math.sqrt(fan_in)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _c(a: np.ndarray | float) -> Constant:
    return Constant(np.asarray(a, dtype=np.float32))


def _linear(h: Expr, w: np.ndarray, b: np.ndarray) -> Expr:
    """x·W + b, as ONNX Gemm / MatMul+Add write it (W is (in, out))."""
    return op.add(op.matmul(h, _c(w)), _c(b))


def gelu_tanh(u: Expr) -> Expr:
    """0.5·u·(1 + tanh(√(2/π)·(u + 0.044715·u³))) spelled out in elementwise ops (u³ = u·u·u)."""
    u3 = op.multiply(op.multiply(u, u), u)
    inner = op.multiply(op.add(u, op.multiply(u3, _c(0.044715))), _c(GELU_C))
    return op.multiply(op.multiply(u, op.add(op.tanh(inner), _c(1.0))), _c(0.5))


def _build_mlp() -> tuple[IRModule, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    weights = [
        (_normal(rng, (i, o)), _normal(rng, (o,), 0.1))
        for i, o in ((784, 512), (512, 512), (512, 10))
    ]
    x_value = rng.standard_normal((64, 784)).astype(np.float32)
    x = var("x", shape=(64, 784))
    h: Expr = x
    for i, (w, b) in enumerate(weights):
        h = _linear(h, w, b)
        if i < 2:
            h = op.relu(h)
    return _module(x, op.softmax(h, axis=-1)), {"x": x_value}


def _build_cnn() -> tuple[IRModule, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    x_value = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    convs = [
        (_normal(rng, (16, 3, 3, 3)), _normal(rng, (16,), 0.1)),
        (_normal(rng, (32, 16, 3, 3)), _normal(rng, (32,), 0.1)),
    ]
    norms = []
    for channels in (16, 32):
        gamma = (1.0 + 0.1 * rng.standard_normal(channels)).astype(np.float32)
        beta = (0.1 * rng.standard_normal(channels)).astype(np.float32)
        mean = (0.1 * rng.standard_normal(channels)).astype(np.float32)
        variance = (0.5 + rng.random(channels)).astype(np.float32)
        norms.append((gamma, beta, mean, variance))
    wd, bd = _normal(rng, (32, 10)), _normal(rng, (10,), 0.1)
    x = var("x", shape=(1, 3, 64, 64))
    h: Expr = x
    for (w, c), bn in zip(convs, norms, strict=True):
        h = op.bias_add(op.conv2d(h, _c(w), padding=(1, 1, 1, 1)), _c(c), axis=1)
        h = TupleGetItem(op.batch_norm(h, *map(_c, bn), epsilon=1e-5), 0)
        h = op.relu(h)
    h = op.flatten(op.global_avg_pool2d(h), axis=1)
    return _module(x, _linear(h, wd, bd)), {"x": x_value}


def _layer_norm(h: Expr, gamma: np.ndarray, beta: np.ndarray) -> Expr:
    return op.layer_norm(h, _c(gamma), _c(beta), axis=-1, epsilon=1e-5)


def _build_transformer() -> tuple[IRModule, dict[str, np.ndarray]]:
    rng = np.random.default_rng(2)
    b, s, d, heads, f = 1, 128, 256, 4, 1024
    dh = d // heads
    x_value = rng.standard_normal((b, s, d)).astype(np.float32)
    ln = [
        (
            (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            (0.1 * rng.standard_normal(d)).astype(np.float32),
        )
        for _ in range(2)
    ]
    wq, wk, wv, wo = [(_normal(rng, (d, d)), _normal(rng, (d,), 0.02)) for _ in range(4)]
    w1 = (_normal(rng, (d, f)), _normal(rng, (f,), 0.02))
    w2 = (_normal(rng, (f, d)), _normal(rng, (d,), 0.02))
    scale = np.float32(1.0 / math.sqrt(dh))

    x = var("x", shape=(b, s, d))
    a = _layer_norm(x, *ln[0])

    def heads_of(w: tuple[np.ndarray, np.ndarray], perm: tuple[int, ...]) -> Expr:
        return op.transpose(op.reshape(_linear(a, *w), newshape=(b, s, heads, dh)), axes=perm)

    q = heads_of(wq, (0, 2, 1, 3))
    k = heads_of(wk, (0, 2, 3, 1))
    v = heads_of(wv, (0, 2, 1, 3))
    probs = op.softmax(op.multiply(op.matmul(q, k), _c(float(scale))), axis=-1)
    ctx = op.reshape(op.transpose(op.matmul(probs, v), axes=(0, 2, 1, 3)), newshape=(b, s, d))
    h1 = op.add(x, _linear(ctx, *wo))
    m = gelu_tanh(_linear(_layer_norm(h1, *ln[1]), *w1))
    return _module(x, op.add(h1, _linear(m, *w2))), {"x": x_value}


def _build_elementwise() -> tuple[IRModule, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    rows, cols = 4096, 1024
    x_value = rng.standard_normal((rows, cols)).astype(np.float32)
    a = (1 + 0.1 * rng.standard_normal(cols)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cols)).astype(np.float32)
    x = var("x", shape=(rows, cols))
    u = op.add(op.multiply(x, _c(a)), _c(b))
    y = op.add(op.multiply(gelu_tanh(u), op.sigmoid(x)), op.tanh(x))
    return _module(x, y), {"x": x_value}


def _module(x: Var, body: Expr) -> IRModule:
    return IRModule({"main": Function((x,), body)})


_BUILDERS: dict[str, Callable[[], tuple[IRModule, dict[str, np.ndarray]]]] = {
    "mlp": _build_mlp,
    "cnn": _build_cnn,
    "transformer": _build_transformer,
    "elementwise": _build_elementwise,
}


def _check(name: str) -> None:
    if name not in _BUILDERS:
        raise UnknownNameError(
            f"unknown model '{name}'{did_you_mean(name, NAMES)}; built-in models: "
            f"{', '.join(NAMES)}"
        )


def get(name: str) -> IRModule:
    """A built-in model by name (one of NAMES)."""
    _check(name)
    return _BUILDERS[name]()[0]


def example_inputs(name: str) -> dict[str, np.ndarray]:
    """The seeded input the reference ONNX files were checked with."""
    _check(name)
    return _BUILDERS[name]()[1]


def mlp() -> IRModule:
    """784→512→512→10 with ReLU and a softmax, batch 64 (85.6 MFLOP)."""
    return get("mlp")


def cnn() -> IRModule:
    """Two conv3x3+batch_norm+relu blocks, global average pool and a 32→10 linear layer."""
    return get("cnn")


def transformer() -> IRModule:
    """One pre-norm encoder block: 4-head attention and a tanh-GELU MLP, 128 tokens of 256."""
    return get("transformer")


def elementwise() -> IRModule:
    """y = gelu(x·a + b)·sigmoid(x) + tanh(x) on a 4096×1024 tensor."""
    return get("elementwise")
