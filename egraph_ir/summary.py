"""What a module contains: ops by name and fusion pattern, parameters, FLOPs and bytes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .expr import Call, Constant
from .infer import infer_type
from .module import IRModule
from .registry import Op
from .types import TensorType
from .visitor import post_order


@dataclass
class ModuleSummary:
    ops: Counter[str] = field(default_factory=Counter)
    patterns: Counter[str] = field(default_factory=Counter)
    constants: int = 0
    constant_elements: int = 0
    constant_bytes: int = 0
    flops: float = 0.0
    bytes_moved: float = 0.0

    @property
    def num_calls(self) -> int:
        return sum(self.ops.values())


def summarize(mod: IRModule) -> ModuleSummary:
    """Count every op call and constant once (shared nodes once) over all functions."""
    infer_type(mod)
    s = ModuleSummary()
    for _, fn in mod.items():
        for node in post_order(fn):
            if isinstance(node, Constant):
                s.constants += 1
                s.constant_elements += node.data.size
                s.constant_bytes += node.data.nbytes
            elif isinstance(node, Call) and isinstance(node.op, Op):
                s.ops[node.op.name] += 1
                s.patterns[node.op.pattern.name] += 1
                args = [a.checked_type for a in node.args]
                cost = node.op.cost(args, node.checked_type, node.attrs)  # type: ignore[arg-type]
                s.flops += cost.flops
                s.bytes_moved += cost.bytes
    return s


def input_types(mod: IRModule) -> dict[str, TensorType]:
    """Parameter name -> tensor type of main."""
    return {
        p.name_hint: p.type_annotation
        for p in mod["main"].params
        if isinstance(p.type_annotation, TensorType)
    }
