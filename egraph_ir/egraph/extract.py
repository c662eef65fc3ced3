"""Greedy extraction: the cheapest term of each e-class by tree cost, then IR again.

Costs come from a cost function of one e-node given its op, attributes and types. Tree cost
counts a shared sub-term once per use (the DAG-optimal extractors come with the extraction
issue); the result is always acyclic because a chosen node's cost includes its children's.
The rebuilt IR keeps sharing: one IR node per chosen e-class.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable

from ..expr import Call, Constant, Expr, Tuple, TupleGetItem
from ..registry import Op
from ..types import TensorType, Type
from .graph import ENode, Snapshot, TensorEGraph, Value, ctor_op, decode_attr

NodeCost = Callable[[ENode, list[Type], Type], float]


def default_node_cost(node: ENode, child_types: list[Type], out_type: Type) -> float:
    """FLOPs + bytes moved from the registry, plus 1 per op so that smaller wins ties."""
    if not node.ctor.startswith("op_"):
        return 0.0
    op = ctor_op(node.ctor)
    attrs = {a.name: decode_attr(s) for a, s in zip(op.attrs, node.literals, strict=True)}
    tensors = [t for t in child_types if isinstance(t, TensorType)]
    cost = op.cost(tensors, out_type, attrs)  # type: ignore[arg-type]
    return 1.0 + cost.flops + cost.bytes


class Extraction:
    """Best node and tree cost per class."""

    def __init__(
        self, g: TensorEGraph, snap: Snapshot, node_cost: NodeCost = default_node_cost
    ) -> None:
        self.g, self.snap = g, snap
        self.best: dict[Value, ENode] = {}
        self.cost: dict[Value, float] = {}
        self._solve(node_cost)

    def class_type(self, c: Value) -> Type:
        return self.g.handle_types[min(self.snap.class_handles[c])]

    def _solve(self, node_cost: NodeCost) -> None:
        """Dijkstra-like bottom-up relaxation: a node is ready when all its children have a
        cost; each improvement re-examines the node's parents."""
        parents: dict[Value, list[ENode]] = defaultdict(list)
        own: dict[ENode, float] = {}
        for n in self.snap.nodes:
            for c in set(n.children):
                parents[c].append(n)
            own[n] = node_cost(
                n, [self.class_type(c) for c in n.children], self.class_type(n.eclass)
            )
        heap: list[tuple[float, int, ENode]] = []
        counter = 0
        for n in self.snap.nodes:
            if not n.children:
                heap.append((own[n], counter, n))
                counter += 1
        heapq.heapify(heap)
        while heap:
            total, _, n = heapq.heappop(heap)
            if total >= self.cost.get(n.eclass, math.inf):
                continue
            self.cost[n.eclass], self.best[n.eclass] = total, n
            for p in parents[n.eclass]:
                if all(c in self.cost for c in p.children):
                    t = own[p] + sum(self.cost[c] for c in p.children)
                    if t < self.cost.get(p.eclass, math.inf):
                        heapq.heappush(heap, (t, counter, p))
                        counter += 1

    def to_ir(self, root: Value) -> Expr:
        """Rebuild IR for root's best term without recursion; one IR node per class."""
        built: dict[Value, Expr] = {}
        stack: list[tuple[Value, bool]] = [(root, False)]
        while stack:
            c, expanded = stack.pop()
            if c in built:
                continue
            node = self.best[c]
            if not expanded:
                stack.append((c, True))
                stack.extend((k, False) for k in reversed(node.children) if k not in built)
                continue
            built[c] = self._node_ir(node, [built[k] for k in node.children])
        return built[root]

    def _node_ir(self, node: ENode, kids: list[Expr]) -> Expr:
        if node.ctor in ("Var", "Opaque"):
            return self.g.leaves[node.literals[0]]
        if node.ctor == "Const":
            return self.g.constants[node.literals[0]]
        if node.ctor == "Get":
            return TupleGetItem(kids[0], int(node.literals[0]))
        if node.ctor.startswith("Tup"):
            return Tuple(tuple(kids))
        op: Op = ctor_op(node.ctor)
        attrs = {a.name: decode_attr(s) for a, s in zip(op.attrs, node.literals, strict=True)}
        return Call(op, tuple(kids), attrs)  # type: ignore[arg-type]


def constant_of(g: TensorEGraph, snap: Snapshot, c: Value) -> Constant | None:
    """A constant in class c, if it has one."""
    for n in snap.by_class.get(c, ()):
        if n.ctor == "Const":
            return g.constants[n.literals[0]]
    return None
