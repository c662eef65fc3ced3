"""Which quantised groups ONNX Runtime leaves in float on x86, so that ours compute what it
computes.

A QDQ file says "dequantize, compute in float, quantize"; ONNX Runtime turns a group of
DequantizeLinear -> op -> QuantizeLinear into one integer kernel only where its selectors
accept it, and on x86 they refuse int8 activations for Conv and MatMul (its
`QDQIsInt8Allowed()` is false off ARM). First it rewrites every int8 QuantizeLinear ->
DequantizeLinear pair whose Q feeds exactly that one DQ, and that DQ one consumer, into
uint8 with the zero point moved by 128 (the same values); a pair whose tensor fans out (a
residual branch) stays int8. Then a group is fused only where its activations' types
agree (input and output; both inputs of an Add or Mul), and for Conv/MatMul are not int8.
The groups it refuses run DequantizeLinear, the float op and QuantizeLinear as written,
which round differently from the integer kernels our rules form; so the importer gives
those groups' activation inputs the dequantize as plain arithmetic, which the quantize
rules do not match. The rewritten pairs are rewritten here too (`shifted`: their Q and DQ
read the zero point plus 128 as uint8): the values are the same, but the integer kernels
ONNX Runtime then runs take uint8 data, whose byte products it sums in saturating pairs
on CPUs without VNNI (passmgr/passes/onnxruntime_sums.py marks uint8 data only). Files
with uint8 activations (every type equal) are not affected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# ONNX Runtime's QDQ groups our rules turn into integer ops: the op, its activation inputs,
# and whether int8 activations are refused on x86
GROUPS: dict[str, tuple[tuple[int, ...], bool]] = {
    "Conv": ((0,), True),
    "MatMul": ((0,), True),
    "Gemm": ((0,), False),
    "Add": ((0, 1), False),
    "Mul": ((0, 1), False),
    "Sigmoid": ((0,), False),
    "Softmax": ((0,), False),
}

FLOAT_SUFFIX = "::float"  # the name the arithmetic form of a DequantizeLinear output takes
UINT8_SUFFIX = "::uint8"  # the name a zero point moved to uint8 takes


@dataclass
class FloatIslands:
    """The plan: DequantizeLinear outputs that also get an arithmetic form, and for each
    node (by its first output's name: tensors are named once) the inputs that read it."""

    dequantized: set[str] = field(default_factory=set)
    inputs: dict[str, set[int]] = field(default_factory=dict)
    shifted: set[str] = field(default_factory=set)  # Q and DQ nodes of rewritten pairs
    uint8_zeros: dict[str, np.ndarray] = field(default_factory=dict)  # by zero point name

    def reads_float(self, proto: Any, i: int) -> bool:
        return bool(proto.output) and i in self.inputs.get(proto.output[0], ())

    def reads_uint8_zero(self, proto: Any, i: int) -> bool:
        """Whether input i of this node is a zero point it reads moved to uint8."""
        return i == 2 and bool(proto.output) and proto.output[0] in self.shifted


def _is(node: Any, op_type: str) -> bool:
    return node.op_type == op_type and node.domain in ("", "ai.onnx")


class _Graph:
    """Producers and consumers of a graph's tensors (graph outputs count as consumers)."""

    def __init__(
        self, nodes: Sequence[Any], outputs: set[str], constant: Callable[[str], Any]
    ) -> None:
        self.constant = constant
        self.producer: dict[str, Any] = {}
        self.consumers: dict[str, list[Any]] = {name: [None] for name in outputs}
        for node in nodes:
            for name in node.output:
                self.producer[name] = node
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(node)

    def zero_point(self, node: Any) -> np.ndarray | None:
        """A Q/DQ node's zero point when it is a one-element constant."""
        if len(node.input) < 3 or not node.input[2]:
            return None
        value = self.constant(node.input[2])
        return value if isinstance(value, np.ndarray) and value.size == 1 else None

    def to_uint8(self, q: Any) -> bool:
        """ONNX Runtime's int8 -> uint8 rewrite of a Q -> DQ pair applies to q."""
        zq = self.zero_point(q)
        users = self.consumers.get(q.output[0], [])
        if zq is None or zq.dtype != np.int8 or len(users) != 1 or users[0] is None:
            return False
        dq = users[0]
        zdq = self.zero_point(dq) if _is(dq, "DequantizeLinear") else None
        if zdq is None or zdq.dtype != np.int8 or int(zdq.item()) != int(zq.item()):
            return False
        return len(self.consumers.get(dq.output[0], [])) == 1

    def activation_type(self, dq: Any) -> str | None:
        """The type ONNX Runtime sees entering a DequantizeLinear, after the rewrite."""
        q = self.producer.get(dq.input[0])
        if q is not None and _is(q, "QuantizeLinear") and self.to_uint8(q):
            return "uint8"
        zero = self.zero_point(dq)
        return None if zero is None else str(zero.dtype)

    def output_type(self, node: Any) -> str | None:
        """The type of the one QuantizeLinear node's output feeds, after the rewrite."""
        users = self.consumers.get(node.output[0], []) if node.output else []
        if len(users) != 1 or users[0] is None or not _is(users[0], "QuantizeLinear"):
            return None
        q = users[0]
        zero = self.zero_point(q)
        if self.to_uint8(q):
            return "uint8"
        return None if zero is None else str(zero.dtype)


def float_islands(
    nodes: Sequence[Any], outputs: set[str], constant: Callable[[str], Any]
) -> FloatIslands:
    """The groups of `nodes` ONNX Runtime would not fuse (see the module docstring); a
    file without int8 activations gets an empty plan."""
    graph = _Graph(nodes, outputs, constant)
    plan = FloatIslands()
    for q in nodes:
        if _is(q, "QuantizeLinear") and graph.to_uint8(q):
            dq = graph.consumers[q.output[0]][0]
            plan.shifted.update((q.output[0], dq.output[0]))
            zero = graph.zero_point(q)
            assert zero is not None
            for node in (q, dq):
                plan.uint8_zeros[node.input[2]] = (zero.astype(np.int16) + 128).astype(np.uint8)
    for node in nodes:
        group = GROUPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if group is None:
            continue
        positions, refuses_int8 = group
        found = [
            graph.producer.get(node.input[i]) if i < len(node.input) else None for i in positions
        ]
        dqs = [dq for dq in found if dq is not None and _is(dq, "DequantizeLinear")]
        if len(dqs) != len(positions):
            continue
        types = [graph.activation_type(dq) for dq in dqs] + [graph.output_type(node)]
        if None in types or "int8" not in types:
            continue
        fused = len(set(types)) == 1 and not (refuses_int8 and types[0] == "int8")
        if fused:
            continue
        plan.inputs[node.output[0]] = set(positions)
        plan.dequantized.update(dq.output[0] for dq in dqs)
    return plan
