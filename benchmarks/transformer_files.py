"""Transformer ONNX files at any size, written node by node as `torch.onnx.export` writes
Hugging Face's models at opset 17 (random weights), for benchmarks at deployed sizes
without torch in the environment:

- `gpt2`: GPT2LMHeadModel without a cache: token and position Gathers; per layer
  LayerNormalization, the fused QKV MatMul + Add, Split, Reshape to heads and Transposes
  (K straight to (0, 2, 3, 1)), the scaled scores with a causal Where, Softmax, the heads
  merged back by Transpose + Reshape, the tanh GELU as its Mul/Pow/Tanh chain; the tied
  vocabulary projection last.
- `gpt2_step`: one decoding step with its KV cache (the past length symbolic), the program
  a generation loop runs once per token.
- `bert`: BertModel's encoder: word, position and token-type embeddings, layer norms
  after each residual, separate Q, K, V projections, an additive attention mask of ones,
  the erf GELU; the last hidden state out.

GPT-2 small (12 layers, 768 wide, 12 heads, 50,257 tokens) and BERT-base (30,522 tokens)
are 0.5 and 0.4 GB of float32: made in /tmp for a run, never committed.

    .venv/bin/python benchmarks/transformer_files.py OUT.onnx [--model gpt2|gpt2-step|bert]
        [--layers 12] [--hidden 768] [--heads 12] [--vocab 50257] [--seq 64] [--batch 1]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Graph:
    """Nodes and initialisers with fresh names."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, hint: str, shape: tuple[int, ...], scale: float = 0.02) -> str:
        return self.const(hint, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: object) -> list[str]:
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, **attrs))
        return names

    def one(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        return self.op(op_type, inputs, **attrs)[0]


def _layer_norm(g: _Graph, x: str, hidden: int) -> str:
    scale = g.const("ln_w", np.ones(hidden, np.float32))
    bias = g.const("ln_b", np.zeros(hidden, np.float32))
    return g.one("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)


def _linear(g: _Graph, x: str, k: int, n: int) -> str:
    """Hugging Face's Conv1D: x @ W (K, N) + b."""
    return g.one("Add", [g.one("MatMul", [x, g.weight("w", (k, n))]), g.weight("b", (n,))])


def _gelu(g: _Graph, x: str) -> str:
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), node by node."""
    cube = g.one("Pow", [x, g.const("three", np.float32(3.0))])
    inner = g.one("Add", [x, g.one("Mul", [cube, g.const("c", np.float32(0.044715))])])
    scaled = g.one("Mul", [inner, g.const("s", np.float32(np.sqrt(2 / np.pi)))])
    one_plus = g.one("Add", [g.one("Tanh", [scaled]), g.const("one", np.float32(1.0))])
    return g.one("Mul", [g.one("Mul", [x, g.const("half", np.float32(0.5))]), one_plus])


def _attention(g: _Graph, x: str, batch: int, seq: int, hidden: int, heads: int) -> str:
    qkv = _linear(g, x, hidden, 3 * hidden)
    split = g.const("split", np.array([hidden] * 3, np.int64))
    q, k, v = g.op("Split", [qkv, split], outputs=3, axis=2)
    heads_shape = g.const("shape", np.array([batch, seq, heads, hidden // heads], np.int64))
    q = g.one("Transpose", [g.one("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])
    k = g.one("Transpose", [g.one("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])
    v = g.one("Transpose", [g.one("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])
    scores = g.one("MatMul", [q, k])
    scores = g.one("Div", [scores, g.const("d", np.float32(np.sqrt(hidden // heads)))])
    causal = np.tril(np.ones((seq, seq), bool))[None, None]
    lowest = g.const("min", np.float32(np.finfo(np.float32).min))
    scores = g.one("Where", [g.const("causal", causal), scores, lowest])
    probs = g.one("Softmax", [scores], axis=-1)
    merged = g.one("Transpose", [g.one("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged_shape = g.const("shape", np.array([batch, seq, hidden], np.int64))
    return _linear(g, g.one("Reshape", [merged, merged_shape]), hidden, hidden)


def _attention_step(g: _Graph, x: str, hidden: int, heads: int, layer: int) -> str:
    """One token's attention over its layer's cache: the new key and value appended to
    past_{layer}_k / _v [1, heads, past, head] (Concat on axis 2) and returned as
    present_{layer}_k / _v; no mask (a token sees the whole cache)."""
    head = hidden // heads
    qkv = _linear(g, x, hidden, 3 * hidden)
    split = g.const("split", np.array([hidden] * 3, np.int64))
    q, k, v = g.op("Split", [qkv, split], outputs=3, axis=2)
    heads_shape = g.const("shape", np.array([1, 1, heads, head], np.int64))
    q, k, v = (
        g.one("Transpose", [g.one("Reshape", [t, heads_shape])], perm=[0, 2, 1, 3])
        for t in (q, k, v)
    )
    names = {}
    for part, new in (("k", k), ("v", v)):
        names[part] = f"present_{layer}_{part}"
        g.nodes.append(
            helper.make_node("Concat", [f"past_{layer}_{part}", new], [names[part]], axis=2)
        )
    keys = g.one("Transpose", [names["k"]], perm=[0, 1, 3, 2])
    scores = g.one("Div", [g.one("MatMul", [q, keys]), g.const("d", np.float32(np.sqrt(head)))])
    probs = g.one("Softmax", [scores], axis=-1)
    merged = g.one("Transpose", [g.one("MatMul", [probs, names["v"]])], perm=[0, 2, 1, 3])
    merged_shape = g.const("shape", np.array([1, 1, hidden], np.int64))
    return _linear(g, g.one("Reshape", [merged, merged_shape]), hidden, hidden)


def gpt2_step(layers: int, hidden: int, heads: int, vocab: int) -> onnx.ModelProto:
    """One decoding step with a KV cache, as a generation loop runs it: input_ids [1, 1]
    and past_{i}_k / past_{i}_v [1, heads, past, head] (past symbolic) -> logits
    [1, 1, vocab] and present_{i}_k / _v [1, heads, past + 1, head]; the token's position
    is the cache's length."""
    g = _Graph(seed=0)
    wte = g.weight("wte", (vocab, hidden))
    past = g.one("Gather", [g.one("Shape", ["past_0_k"]), g.const("two", np.int64(2))], axis=0)
    position = g.one("Reshape", [past, g.const("shape", np.array([1, 1], np.int64))])
    h = g.one(
        "Add",
        [
            g.one("Gather", [wte, "input_ids"], axis=0),
            g.one("Gather", [g.weight("wpe", (1024, hidden), 0.01), position], axis=0),
        ],
    )
    for layer in range(layers):
        attention = _attention_step(g, _layer_norm(g, h, hidden), hidden, heads, layer)
        h = g.one("Add", [h, attention])
        mlp = _linear(g, _layer_norm(g, h, hidden), hidden, 4 * hidden)
        h = g.one("Add", [h, _linear(g, _gelu(g, mlp), 4 * hidden, hidden)])
    tied = g.one("Transpose", [wte], perm=[1, 0])
    g.nodes.append(helper.make_node("MatMul", [_layer_norm(g, h, hidden), tied], ["logits"]))
    cache = [1, heads, "past", hidden // heads]
    grown = [1, heads, "total", hidden // heads]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, vocab])]
    for layer in range(layers):
        for part in ("k", "v"):
            inputs.append(
                helper.make_tensor_value_info(f"past_{layer}_{part}", TensorProto.FLOAT, cache)
            )
            outputs.append(
                helper.make_tensor_value_info(f"present_{layer}_{part}", TensorProto.FLOAT, grown)
            )
    graph = helper.make_graph(g.nodes, "gpt2_step", inputs, outputs, g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def gpt2(
    layers: int, hidden: int, heads: int, vocab: int, seq: int, batch: int = 1
) -> onnx.ModelProto:
    """input_ids [batch, seq] int64 -> logits [batch, seq, vocab]."""
    g = _Graph(seed=0)
    wte = g.weight("wte", (vocab, hidden))
    positions = g.const("positions", np.arange(seq, dtype=np.int64)[None])
    h = g.one(
        "Add",
        [
            g.one("Gather", [wte, "input_ids"], axis=0),
            g.one("Gather", [g.weight("wpe", (1024, hidden), 0.01), positions], axis=0),
        ],
    )
    for _ in range(layers):
        h = g.one("Add", [h, _attention(g, _layer_norm(g, h, hidden), batch, seq, hidden, heads)])
        mlp = _linear(g, _layer_norm(g, h, hidden), hidden, 4 * hidden)
        h = g.one("Add", [h, _linear(g, _gelu(g, mlp), 4 * hidden, hidden)])
    tied = g.one("Transpose", [wte], perm=[1, 0])
    g.nodes.append(helper.make_node("MatMul", [_layer_norm(g, h, hidden), tied], ["logits"]))
    graph = helper.make_graph(
        g.nodes,
        "gpt2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, vocab])],
        g.inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _bert_attention(g: _Graph, x: str, batch: int, seq: int, hidden: int, heads: int) -> str:
    head = hidden // heads
    shape = g.const("shape", np.array([batch, seq, heads, head], np.int64))
    q, k, v = (
        g.one("Reshape", [_linear(g, x, hidden, hidden), shape]) for _ in range(3)
    )  # three projections, each to (batch, seq, heads, head)
    q = g.one("Transpose", [q], perm=[0, 2, 1, 3])
    k = g.one("Transpose", [k], perm=[0, 2, 3, 1])
    v = g.one("Transpose", [v], perm=[0, 2, 1, 3])
    scores = g.one("Div", [g.one("MatMul", [q, k]), g.const("d", np.float32(np.sqrt(head)))])
    mask = g.const("mask", np.zeros((batch, 1, 1, seq), np.float32))  # (1 - ones) * min
    probs = g.one("Softmax", [g.one("Add", [scores, mask])], axis=-1)
    merged = g.one("Transpose", [g.one("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged_shape = g.const("shape", np.array([batch, seq, hidden], np.int64))
    return _linear(g, g.one("Reshape", [merged, merged_shape]), hidden, hidden)


def _erf_gelu(g: _Graph, x: str) -> str:
    """x * 0.5 * (1 + erf(x / sqrt(2)))."""
    erf = g.one("Erf", [g.one("Div", [x, g.const("r2", np.float32(np.sqrt(2.0)))])])
    one_plus = g.one("Add", [erf, g.const("one", np.float32(1.0))])
    return g.one("Mul", [g.one("Mul", [x, one_plus]), g.const("half", np.float32(0.5))])


def bert(
    layers: int, hidden: int, heads: int, vocab: int, seq: int, batch: int = 1
) -> onnx.ModelProto:
    """input_ids [batch, seq] int64 -> last_hidden_state [batch, seq, hidden]."""
    g = _Graph(seed=0)
    positions = g.const("positions", np.arange(seq, dtype=np.int64)[None])
    types = g.const("types", np.zeros((batch, seq), np.int64))
    tables = [
        (g.weight("word", (vocab, hidden)), "input_ids"),
        (g.weight("position", (512, hidden)), positions),
        (g.weight("type", (2, hidden)), types),
    ]
    sums = [g.one("Gather", [table, ids], axis=0) for table, ids in tables]
    h = _layer_norm(g, g.one("Add", [g.one("Add", sums[:2]), sums[2]]), hidden)
    for _ in range(layers):
        attention = _bert_attention(g, h, batch, seq, hidden, heads)
        h = _layer_norm(g, g.one("Add", [attention, h]), hidden)
        mlp = _linear(g, _erf_gelu(g, _linear(g, h, hidden, 4 * hidden)), 4 * hidden, hidden)
        h = _layer_norm(g, g.one("Add", [mlp, h]), hidden)
    g.nodes.append(helper.make_node("Identity", [h], ["last_hidden_state"]))
    graph = helper.make_graph(
        g.nodes,
        "bert",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq])],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, [batch, seq, hidden]
            )
        ],
        g.inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--model", choices=["gpt2", "gpt2-step", "bert"], default="gpt2")
    a = parser.parse_args()
    if a.model == "gpt2-step":
        model = gpt2_step(a.layers, a.hidden, a.heads, a.vocab)
    elif a.model == "bert":
        model = bert(a.layers, a.hidden, a.heads, a.vocab, a.seq, a.batch)
    else:
        model = gpt2(a.layers, a.hidden, a.heads, a.vocab, a.seq, a.batch)
    data = a.out.with_name(a.out.name + ".data")
    data.unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save(model, str(a.out), save_as_external_data=True, location=data.name)
    print(f"wrote {a.out} and {data.name} ({data.stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
