"""Malformed-input fuzzers: mutated IR text, mutated rule files and malformed ONNX models.
The contract under test: bad input gives a CompilerError (with the place), never another
exception. Each case function returns None when the contract holds, else what escaped."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

import rules
from egraph_ir.errors import CompilerError
from egraph_ir.infer import infer_type
from egraph_ir.interp import interpret
from egraph_ir.text.parser import parse
from egraph_ir.types import TensorType

from .programs import random_program

TOKENS = ["(", ")", "[", "]", "{", "}", ",", "=", "%", "@", ".", ";", "0", "-1", "1e309", "nan",
          "float16", "int8", "Tensor[", "fn", "let", "if", "=>", "<=>", "?x", "?", "where",
          "rule", "pattern", "\\x", '"', "\n", "#", "meta[Constant][0]", "é", "\x00"]  # fmt: skip


def mutate_text(text: str, rng: np.random.Generator, edits: int = 3) -> str:
    """Delete, duplicate or insert a few characters or tokens."""
    s = text
    for _ in range(int(rng.integers(1, edits + 1))):
        if not s:
            s = str(rng.choice(TOKENS))
            continue
        i = int(rng.integers(len(s)))
        j = min(len(s), i + int(rng.integers(1, 8)))
        kind = int(rng.integers(4))
        if kind == 0:
            s = s[:i] + s[j:]
        elif kind == 1:
            s = s[:j] + s[i:j] + s[j:]
        elif kind == 2:
            s = s[:i] + str(rng.choice(TOKENS)) + s[i:]
        else:
            s = s[:i] + s[i:j][::-1] + s[j:]
    return s


def _contract(fn: Callable[[], Any]) -> str | None:
    try:
        fn()
    except CompilerError:
        return None
    except Exception:
        return traceback.format_exc(limit=6)
    return None


def ir_text_case(rng: np.random.Generator) -> tuple[str | None, str]:
    """(what escaped, the input): a printed random program, mutated, parsed and run."""
    case = random_program(rng, max_ops=5, extremes=False)
    text = case.mod.astext() if case is not None else "def @main() { 0f }"
    bad = mutate_text(text, rng)

    def go() -> None:
        mod = infer_type(parse(bad))
        fn = mod["main"]
        types = [p.checked_type for p in fn.params]
        args = [np.zeros(t.shape, t.dtype) for t in types if isinstance(t, TensorType)]
        if len(args) != len(types):
            return
        if sum(a.size for a in args) < 1 << 16:
            interpret(mod, *args)

    return _contract(go), bad


def rule_text_case(rng: np.random.Generator) -> tuple[str | None, str]:
    """A built-in rule file or pattern table, mutated and loaded."""
    name = str(
        rng.choice(["algebraic", "layout", "cast", "fold_scale_axis", "simplify_inference", "blas"])
    )
    suffix = ".patterns" if name == "blas" else ".rules"
    text = (rules.BUILTIN_DIR / f"{name}{suffix}").read_text()
    lines = text.splitlines()
    start = int(rng.integers(max(1, len(lines) - 12)))
    bad = mutate_text("\n".join(lines[start : start + 12]), rng)
    parse_fn = rules.parse_patterns if suffix == ".patterns" else rules.parse
    return _contract(lambda: parse_fn(bad, "fuzz" + suffix)), bad


def onnx_case(rng: np.random.Generator) -> tuple[str | None, bytes]:
    """A random program exported to ONNX, its protobuf fields damaged, then imported."""
    import onnx

    from egraph_ir.frontend import from_onnx, to_onnx

    case = random_program(rng, max_ops=4, extremes=False)
    if case is None:
        return None, b""
    try:
        model = to_onnx(case.mod)
    except CompilerError:
        return None, b""
    _damage(model, rng)
    data = model.SerializeToString()
    if rng.random() < 0.2:  # damage the bytes themselves
        cut = int(rng.integers(len(data)))
        data = data[:cut] + bytes(rng.integers(0, 256, 4, dtype=np.uint8)) + data[cut + 4 :]
    return _contract(lambda: from_onnx(onnx.load_from_string(data)) if _loads(data) else None), data


def _loads(data: bytes) -> bool:
    import onnx

    try:
        onnx.load_from_string(data)
    except Exception:  # not protobuf at all: onnx's own error, not ours to give
        return False
    return True


def _damage(model: Any, rng: np.random.Generator) -> None:
    g = model.graph
    choice = int(rng.integers(9))
    nodes = list(g.node)
    if choice == 0 and nodes:
        n = nodes[int(rng.integers(len(nodes)))]
        if n.input:
            del n.input[int(rng.integers(len(n.input)))]
    elif choice == 1 and nodes:
        n = nodes[int(rng.integers(len(nodes)))]
        if n.attribute:
            del n.attribute[int(rng.integers(len(n.attribute)))]
    elif choice == 2 and nodes:
        n = nodes[int(rng.integers(len(nodes)))]
        n.op_type = str(
            rng.choice(["Relu", "Conv", "Reshape", "Gather", "Split", "Cast", "Unknown"])
        )
    elif choice == 3 and len(nodes) > 1:
        nodes[0].output[0] = nodes[-1].output[0]  # a name defined twice
    elif choice == 4:
        del g.output[:]
    elif choice == 5 and g.initializer:
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        if t.raw_data:
            t.raw_data = t.raw_data[: len(t.raw_data) // 2]
        else:
            t.data_type = int(rng.integers(0, 30))
    elif choice == 6 and g.input:
        g.input[0].type.tensor_type.elem_type = int(rng.integers(0, 30))
    elif choice == 7:
        model.opset_import[0].version = int(rng.integers(1, 40))
    elif nodes:
        n = nodes[int(rng.integers(len(nodes)))]
        for a in n.attribute:
            if a.ints:
                a.ints[0] = int(rng.integers(-100, 100))
            elif a.type == a.INT:
                a.i = int(rng.integers(-100, 100))
