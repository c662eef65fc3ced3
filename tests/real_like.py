"""Small ONNX models built in code with the structure of the real exports in
../shared/models/real, so that a fresh clone (no ../shared) tests the same paths: a
residual CNN with batch norms and a downsampling block (resnet18), inverted residuals with
depthwise convolutions and clipped activations (mobilenet_v2), a transformer encoder with
token embeddings, attention, layer norms and an erf GELU (bert_tiny2) and an LSTM layer
(lstm1). Each is a few hundred kilobytes at most; weights are seeded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Builder = Callable[[], tuple[Any, dict[str, np.ndarray]]]


class _Graph:
    """Nodes, initialisers and fresh names for one model."""

    def __init__(self, seed: int) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0
        self.node_names: set[str] = set()

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, value: np.ndarray, stem: str = "w") -> str:
        name = self.name(stem)
        self.inits.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def node(self, op: str, inputs: list[str], scope: str, **attrs: Any) -> str:
        out = self.name(op.lower())
        name, k = f"/{scope}/{op}", 0
        while name in self.node_names:  # as PyTorch names repeats: Mul, Mul_1, ...
            k += 1
            name = f"/{scope}/{op}_{k}"
        self.node_names.add(name)
        self.nodes.append(self.helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def model(self, inputs: list[Any], output: str, shape: list[int]) -> Any:
        from onnx import TensorProto

        self.nodes[-1].output[0] = output
        graph = self.helper.make_graph(
            self.nodes,
            "real_like",
            inputs,
            [self.helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)],
            self.inits,
        )
        opset = [self.helper.make_opsetid("", 17)]
        return self.helper.make_model(graph, opset_imports=opset)

    # ------------------------------------------------------------ layers
    def conv_bn(self, x: str, cin: int, cout: int, k: int, scope: str, stride: int = 1,
                group: int = 1) -> str:  # fmt: skip
        w = self.weight(cout, cin // group, k, k)
        pad = k // 2
        y = self.node("Conv", [x, w], f"{scope}/conv", kernel_shape=[k, k],
                      strides=[stride, stride], pads=[pad] * 4, group=group)  # fmt: skip
        gamma = self.const(self.rng.uniform(0.5, 1.5, cout).astype(np.float32))
        beta = self.const(self.rng.standard_normal(cout).astype(np.float32) * 0.1)
        mean = self.const(self.rng.standard_normal(cout).astype(np.float32) * 0.1)
        var = self.const(self.rng.uniform(0.5, 1.5, cout).astype(np.float32))
        return self.node("BatchNormalization", [y, gamma, beta, mean, var], f"{scope}/bn")

    def head(self, x: str, channels: int, classes: int, scope: str = "fc") -> str:
        x = self.node("GlobalAveragePool", [x], "pool")
        x = self.node("Flatten", [x], "flatten", axis=1)
        w, b = self.weight(classes, channels), self.weight(classes, scale=0.1)
        return self.node("Gemm", [x, w, b], scope, transB=1)

    def layer_norm(self, x: str, width: int, scope: str) -> str:
        scale = self.const(self.rng.uniform(0.5, 1.5, width).astype(np.float32))
        bias = self.const(self.rng.standard_normal(width).astype(np.float32) * 0.1)
        return self.node("LayerNormalization", [x, scale, bias], scope, axis=-1)

    def linear(self, x: str, cin: int, cout: int, scope: str) -> str:
        y = self.node("MatMul", [x, self.weight(cin, cout)], f"{scope}/MatMul")
        return self.node("Add", [y, self.weight(cout, scale=0.1)], f"{scope}/Add")


def _input(name: str, dtype: int, shape: list[int]) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, dtype, shape)


def resnet18() -> tuple[Any, dict[str, np.ndarray]]:
    from onnx import TensorProto

    g = _Graph(18)
    x = g.node("Relu", [g.conv_bn("input", 3, 16, 7, "conv1", stride=2)], "relu")
    x = g.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    for block, (cin, cout, stride) in enumerate([(16, 16, 1), (16, 32, 2)]):
        scope = f"layer{block + 1}"
        y = g.node("Relu", [g.conv_bn(x, cin, cout, 3, f"{scope}/conv1", stride)], scope)
        y = g.conv_bn(y, cout, cout, 3, f"{scope}/conv2")
        skip = x if stride == 1 else g.conv_bn(x, cin, cout, 1, f"{scope}/downsample", stride)
        x = g.node("Relu", [g.node("Add", [y, skip], scope)], f"{scope}/relu_1")
    g.head(x, 32, 10)
    inputs = {"input": g.rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    return g.model([_input("input", TensorProto.FLOAT, [1, 3, 32, 32])], "output", [1, 10]), inputs


def mobilenet_v2() -> tuple[Any, dict[str, np.ndarray]]:
    from onnx import TensorProto

    g = _Graph(2)
    six = g.const(np.float32(6.0), "six")
    zero = g.const(np.float32(0.0), "zero")

    def clip(v: str, scope: str) -> str:
        return g.node("Clip", [v, zero, six], scope)

    x = clip(g.conv_bn("input", 3, 16, 3, "features.0", stride=2), "features.0")
    for i, (cin, cout, stride) in enumerate([(16, 16, 1), (16, 24, 2), (24, 24, 1)]):
        scope, hidden = f"features.{i + 1}/conv", cin * 4
        y = clip(g.conv_bn(x, cin, hidden, 1, f"{scope}/expand"), f"{scope}/expand")
        y = g.conv_bn(y, hidden, hidden, 3, f"{scope}/depthwise", stride, group=hidden)
        y = g.conv_bn(clip(y, f"{scope}/depthwise"), hidden, cout, 1, f"{scope}/project")
        x = g.node("Add", [x, y], f"features.{i + 1}") if stride == 1 and cin == cout else y
    g.head(x, 24, 10, "classifier")
    inputs = {"input": g.rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    return g.model([_input("input", TensorProto.FLOAT, [1, 3, 32, 32])], "output", [1, 10]), inputs


def bert_tiny2() -> tuple[Any, dict[str, np.ndarray]]:
    from onnx import TensorProto

    g = _Graph(7)
    seq, width, heads, vocab = 8, 32, 2, 50
    x = g.node("Gather", [g.weight(vocab, width, scale=0.5), "input_ids"], "embeddings")
    x = g.node("Add", [x, g.weight(1, seq, width, scale=0.1)], "embeddings/position")
    x = g.layer_norm(x, width, "embeddings/LayerNorm")
    split = g.const(np.array([1, seq, heads, width // heads], np.int64), "shape")
    merged = g.const(np.array([1, seq, width], np.int64), "shape")
    for layer in range(2):
        scope = f"encoder/layer.{layer}"
        q, k, v = (
            g.node("Transpose",
                   [g.node("Reshape", [g.linear(x, width, width, f"{scope}/{n}"), split],
                           f"{scope}/{n}")],
                   f"{scope}/{n}", perm=[0, 2, 1, 3])
            for n in ("query", "key", "value")
        )  # fmt: skip
        kt = g.node("Transpose", [k], f"{scope}/key_t", perm=[0, 1, 3, 2])
        scores = g.node("MatMul", [q, kt], f"{scope}/scores")
        root = g.const(np.float32(np.sqrt(width // heads)), "root")
        probs = g.node("Softmax", [g.node("Div", [scores, root], scope)], scope, axis=-1)
        ctx = g.node("Transpose", [g.node("MatMul", [probs, v], scope)], scope, perm=[0, 2, 1, 3])
        ctx = g.node("Reshape", [ctx, merged], f"{scope}/context")
        attn = g.linear(ctx, width, width, f"{scope}/attention/output")
        x = g.layer_norm(g.node("Add", [attn, x], scope), width, f"{scope}/attention/LayerNorm")
        h = g.linear(x, width, 4 * width, f"{scope}/intermediate")
        half = g.const(np.float32(0.5), "half")
        one = g.const(np.float32(1.0), "one")
        root2 = g.const(np.float32(np.sqrt(2.0)), "root2")
        erf = g.node("Erf", [g.node("Div", [h, root2], f"{scope}/gelu")], f"{scope}/gelu")
        gelu = g.node("Mul", [g.node("Mul", [h, half], f"{scope}/gelu"),
                              g.node("Add", [erf, one], f"{scope}/gelu")], f"{scope}/gelu")  # fmt: skip
        out = g.linear(gelu, 4 * width, width, f"{scope}/output")
        x = g.layer_norm(g.node("Add", [out, x], scope), width, f"{scope}/output/LayerNorm")
    g.node("Identity", [x], "last_hidden_state")
    ids = g.rng.integers(0, vocab, size=(1, seq)).astype(np.int64)
    model = g.model([_input("input_ids", TensorProto.INT64, [1, seq])], "output", [1, seq, width])
    return model, {"input_ids": ids}


def lstm1() -> tuple[Any, dict[str, np.ndarray]]:
    from onnx import TensorProto

    g = _Graph(1)
    steps, features, hidden = 6, 8, 16
    x = g.node("Transpose", ["input"], "lstm/transpose", perm=[1, 0, 2])  # batch first
    w = g.weight(1, 4 * hidden, features)
    r = g.weight(1, 4 * hidden, hidden)
    b = g.weight(1, 8 * hidden, scale=0.1)
    y = g.node("LSTM", [x, w, r, b], "lstm", hidden_size=hidden)
    y = g.node("Squeeze", [y, g.const(np.array([1], np.int64), "axes")], "lstm/squeeze")
    last = g.node("Gather", [y, g.const(np.int64(steps - 1), "last")], "lstm/last", axis=0)
    g.node("Gemm", [last, g.weight(4, hidden), g.weight(4, scale=0.1)], "fc", transB=1)
    inputs = {"input": g.rng.standard_normal((1, steps, features)).astype(np.float32)}
    model = g.model([_input("input", TensorProto.FLOAT, [1, steps, features])], "output", [1, 4])
    return model, inputs


BUILDERS: dict[str, Builder] = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "bert_tiny2": bert_tiny2,
    "lstm1": lstm1,
}
