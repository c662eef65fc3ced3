"""The execution graph: the fused main function as a list of steps in execution order.

`build_graph(fn, lower_group)` walks the fused main function (dataflow only) and makes one
node per graph input, constant, fused kernel, reshape-only group (an alias of its input's
storage) and tuple field; `lower_group` (codegen/lower/) turns each primitive function
into a kernel. Memory planning (codegen/plan/memory.py) and the runtime read this graph.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from egraph_ir.device import VirtualDevice
from egraph_ir.egraph.kernel_cost import CONVOLUTIONS, KernelCost
from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var
from egraph_ir.registry import Op
from egraph_ir.tensor_layouts import result_layout
from egraph_ir.types import TensorType, tensor_types
from egraph_ir.visitor import post_order

from ..lower.kinds import CompiledKernel

ALIAS_OPS = {"reshape", "flatten", "squeeze", "expand_dims"}

LowerGroup = Callable[[Function, int], CompiledKernel]  # a primitive function, its node id
LowerGlobal = Callable[[str], CompiledKernel]  # a called global function (external region)


@dataclass(frozen=True, slots=True)
class _Entry:
    """What every node has: its id (its position), a name, the nodes it reads, its value's
    shape and dtype (None for a tuple-valued kernel)."""

    id: int
    name: str
    inputs: tuple[int, ...]
    shape: tuple[int, ...] | None
    dtype: str | None

    def to_json(self, storage_id: int, device: int) -> dict[str, Any]:
        return {
            "op": self.op,  # type: ignore[attr-defined]
            "name": self.name,
            "inputs": list(self.inputs),
            "storage_id": storage_id,
            "device_index": device,
            "shape": list(self.shape) if self.shape is not None else None,
            "dtype": self.dtype,
        }


@dataclass(frozen=True, slots=True)
class InputNode(_Entry):
    """A graph input, fed by the caller."""

    op: ClassVar[str] = "input"


@dataclass(frozen=True, slots=True)
class ParamNode(_Entry):
    """A constant (weights), bound at build time."""

    value: np.ndarray = field(default_factory=lambda: np.zeros(0))
    op: ClassVar[str] = "param"


@dataclass(frozen=True, slots=True)
class KernelNode(_Entry):
    """A fused group's kernel (or an external region's); `kernel` is what runs it."""

    kernel: CompiledKernel | None = None
    kind: str = ""  # the kernel's kind
    ops: tuple[str, ...] = ()
    flops: float = 0.0  # of the kernel's ops, from the registry's cost estimates
    bytes: float = 0.0  # the kernel's inputs read and output written
    variant: str = ""  # which kernel of its kind (a convolution's: direct, channels, ...)
    sources: tuple[str, ...] = ()  # the model's nodes it computes (ONNX node names)
    predicted: float = 0.0  # seconds the `kernels` cost model estimated for it
    layout: str = ""  # of its result: NCHW, NCHW16c, ... ("": not a laid-out tensor)
    op: ClassVar[str] = "kernel"

    def to_json(self, storage_id: int, device: int) -> dict[str, Any]:
        entry = _Entry.to_json(self, storage_id, device)
        entry.update(kind=self.kind, ops=list(self.ops), flops=self.flops, bytes=self.bytes)
        entry["variant"] = self.variant
        entry["sources"] = list(self.sources)
        entry["predicted"] = self.predicted
        entry["layout"] = self.layout
        return entry


@dataclass(frozen=True, slots=True)
class AliasNode(_Entry):
    """A reshape-only group: its value is its input's storage, seen with another shape."""

    op: ClassVar[str] = "alias"


@dataclass(frozen=True, slots=True)
class FieldNode(_Entry):
    """Field `index` of a tuple-valued kernel."""

    index: int = 0
    op: ClassVar[str] = "field"


Node = InputNode | ParamNode | KernelNode | AliasNode | FieldNode


@dataclass(frozen=True)
class Graph:
    """The nodes in execution order, the inputs, the outputs (node ids), and the copies
    between devices the program asks for (node id -> source, destination)."""

    nodes: list[Node]
    inputs: list[InputNode]
    outputs: list[int]
    tuple_output: bool
    copies: dict[int, tuple[VirtualDevice, VirtualDevice]] = field(default_factory=dict)
    output_tree: Any = None  # nested outputs: tuples of indices into `outputs`

    def shape_outputs(self, results: list[Any]) -> Any:
        """The run's results in main's output structure: one value, a tuple, or nested
        tuples (`(x1, ((x2, x3), x4))`)."""
        if self.output_tree is not None:
            return nest(self.output_tree, results)
        return tuple(results) if self.tuple_output else results[0]

    def kernels(self) -> list[CompiledKernel]:
        return [n.kernel for n in self.nodes if isinstance(n, KernelNode) and n.kernel]

    def to_json(
        self, arena_bytes: int, storage: dict[int, int], device: list[int], names: list[str]
    ) -> str:
        """TVM-style graph JSON; storage ids and devices come from their plans."""
        return json.dumps(
            {
                "nodes": [n.to_json(storage.get(n.id, -1), device[n.id]) for n in self.nodes],
                "heads": self.outputs,
                "devices": names,
                "arena_bytes": arena_bytes,
            },
            indent=1,
        )


def nest(tree: Any, leaves: list[Any]) -> Any:
    """Leaves placed in a tree of indices (tuples nest; recursion over tuple nesting only)."""
    if isinstance(tree, int):
        return leaves[tree]
    return tuple(nest(t, leaves) for t in tree)


def output_leaves(body: Expr) -> tuple[list[Expr], Any, set[Expr]]:
    """The values a (possibly nested) tuple result is made of, in order; the tree of their
    indices; and the tuple nodes that only build the result."""
    leaves: list[Expr] = []
    tuples: set[Expr] = set()

    def walk(e: Expr) -> Any:
        if isinstance(e, Tuple):
            tuples.add(e)
            return tuple(walk(f) for f in e.fields)
        leaves.append(e)
        return len(leaves) - 1

    return leaves, walk(body), tuples


def storage_root(nodes: list[Node], n: Node) -> Node:
    """The node whose storage `n` uses (aliases share their source's)."""
    while isinstance(n, AliasNode):
        n = nodes[n.inputs[0]]
    return n


def alias_op(fn: Function) -> str | None:
    """The op of a primitive function that only reshapes its one input (no kernel needed:
    the result shares the input's storage), else None."""
    body = fn.body
    if not isinstance(body, Call) or len(fn.params) != 1 or body.args[0] is not fn.params[0]:
        return None
    name = getattr(body.op, "name", None)
    return name if name in ALIAS_OPS and isinstance(body.checked_type, TensorType) else None


def group_cost(call: Call, fn: Function | None = None) -> tuple[float, float]:
    """FLOPs of a fused group's ops (the registry's estimates) and the bytes it must move:
    its inputs and constants (weights) read once and its outputs written once (fusion keeps
    the rest in registers). `fn` is the called function when the call names a global."""
    fn = fn if fn is not None else call.op  # type: ignore[assignment]
    assert isinstance(fn, Function)
    flops = moved = 0.0
    for node in post_order(fn.body):  # composites' bodies included
        if isinstance(node, Constant):
            moved += node.data.nbytes
        elif isinstance(node, Call) and isinstance(node.op, Op):
            args = [a.checked_type for a in node.args]
            flops += node.op.cost(args, node.checked_type, node.attrs).flops  # type: ignore[arg-type]
    moved += sum(t.nbytes for a in call.args for t in tensor_types(a.checked_type))
    moved += sum(t.nbytes for t in tensor_types(call.checked_type))
    return flops, float(moved)


def source_names(fn: Function) -> tuple[str, ...]:
    """The model's nodes a group computes: its calls' span names (ONNX node names, kept
    through rewriting by egraph_ir/egraph/spans.py), in the model's order."""
    spans = {
        node.span
        for node in post_order(fn.body)
        if isinstance(node, Call) and node.span is not None and node.span.name
    }
    ordered = sorted(spans, key=lambda s: (s.line, s.name))
    names = (n for s in ordered for n in s.name.split(" + "))
    return tuple(dict.fromkeys(names))


def _kernel_node(
    node_id: int,
    call: Call,
    args: tuple[int, ...],
    kernel: CompiledKernel,
    fn: Function,
    costs: KernelCost,
    layout: str,
) -> KernelNode:
    t = call.checked_type
    shape, dtype = (t.shape, t.dtype) if isinstance(t, TensorType) else (None, None)
    ops = tuple(kernel.ops)
    variant = getattr(kernel, "variant", "")
    cost = group_cost(call, fn)
    sources = source_names(fn)
    return KernelNode(
        node_id, kernel.name, args, shape, dtype, kernel, kernel.kind, ops, *cost, variant,
        sources, predicted_seconds(fn, costs), layout,
    )  # fmt: skip


PREDICTED_OPS = (*CONVOLUTIONS, "layout_transform")  # what its rates measure


def predicted_seconds(fn: Function, model: KernelCost) -> float:
    """What the `kernels` cost model (the one BlockLayout extracts with) estimates for a
    group with a convolution or a layout conversion — the kernels whose rates it holds —
    summed over its calls, so a profile can set it beside the measured time; 0 for other
    groups (the model only has the roofline's machine figures for them)."""
    calls = [n for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]
    if not any(c.op.name in PREDICTED_OPS for c in calls):  # type: ignore[union-attr]
        return 0.0
    total = 0.0
    for node in calls:
        args = [a.checked_type for a in node.args]
        total += model.estimate(node.op, args, node.checked_type, node.attrs)  # type: ignore[arg-type]
    return total * 1e-6


def build_graph(
    fn: Function, lower_group: LowerGroup | None, lower_global: LowerGlobal | None = None
) -> Graph:
    """Nodes for a fused main function (no control flow), kernels lowered on the way;
    calls of global functions (external regions) become kernels through `lower_global`.
    Without `lower_group` the nodes only say their shapes (kernel None): a symbolic
    program's graph, whose shapes name its sizes (codegen/plan/every_size.py)."""
    ids: dict[Expr, int] = {}
    nodes: list[Node] = []
    copies: dict[int, tuple[VirtualDevice, VirtualDevice]] = {}
    costs = KernelCost()  # the profile's predictions: read this CPU's figures once
    layouts: dict[int, str] = {}  # node id -> the layout of its tensor (the report's)

    def add(node: Node, expr: Expr, layout: str = "") -> None:
        ids[expr] = node.id
        nodes.append(node)
        layouts[node.id] = layout

    def layout_of(group: Function, args: tuple[int, ...]) -> str:
        return result_layout(group, [layouts.get(a, "") for a in args])

    leaves, tree, result_tuples = output_leaves(fn.body)
    views: dict[Expr, tuple[int, int]] = {}  # a nested tuple field: (its node, flat offset)
    inputs: list[InputNode] = []
    for p in fn.params:
        t = p.checked_type
        if not isinstance(t, TensorType):
            raise CodegenError(f"input %{p.name_hint} has type {t}; only tensors are supported")
        node = InputNode(len(nodes), p.name_hint, (), t.shape, t.dtype)
        add(node, p, "NCHW" if len(t.shape) == 4 else "")
        inputs.append(node)
    for e in post_order(fn.body, into_functions=False):
        if e in ids:
            continue
        t = e.checked_type
        shape, dtype = (t.shape, t.dtype) if isinstance(t, TensorType) else (None, None)
        if isinstance(e, Constant):
            add(ParamNode(len(nodes), f"p{len(nodes)}", (), shape, dtype, e.data), e)
        elif isinstance(e, Call) and isinstance(e.op, Function) and e.op.attrs.get("Primitive"):
            args = tuple(ids[a] for a in e.args)
            alias = alias_op(e.op)
            if alias is not None:
                add(AliasNode(len(nodes), alias, args, shape, dtype), e, layout_of(e.op, args))
                continue
            if lower_group is None:
                add(KernelNode(len(nodes), "", args, shape, dtype), e)
                continue
            kernel = lower_group(e.op, len(nodes))
            if (copy := _device_copy(e.op)) is not None:
                copies[len(nodes)] = copy
            layout = layout_of(e.op, args)
            add(_kernel_node(len(nodes), e, args, kernel, e.op, costs, layout), e, layout)
        elif isinstance(e, Call) and isinstance(e.op, GlobalVar) and lower_global is not None:
            kernel = lower_global(e.op.name_hint)
            args = tuple(ids[a] for a in e.args)
            region: Function = kernel.function  # type: ignore[attr-defined]
            layout = layout_of(region, args)
            add(_kernel_node(len(nodes), e, args, kernel, region, costs, layout), e, layout)
        elif isinstance(e, TupleGetItem):
            source, index = _flat_field(e, ids, views)
            if shape is None:  # a tuple inside a tuple: read through it, field by field
                views[e] = (source, index)
            else:
                add(FieldNode(len(nodes), "field", (source,), shape, dtype, index), e)
        elif (isinstance(e, Tuple) and e in result_tuples) or isinstance(e, GlobalVar):
            continue
        elif isinstance(e, Var):
            raise CodegenError(f"free variable %{e.name_hint} in the main function")
        else:
            raise CodegenError(
                f"the graph executor cannot run {type(e).__name__} nodes (control flow, "
                "calls of non-primitive functions); run FuseOps on a dataflow function"
            )
    sources = [views[leaf] if leaf in views else (ids[leaf], 0) for leaf in leaves]
    outputs, tree = _tensor_outputs(nodes, sources, leaves, tree)
    tuple_output = not isinstance(tree, int)
    nested = tuple_output and any(not isinstance(f, int) for f in tree)
    return Graph(
        nodes, inputs, outputs, tuple_output, copies=copies, output_tree=tree if nested else None
    )


def _device_copy(group: Function) -> tuple[VirtualDevice, VirtualDevice] | None:
    """The devices a group that only copies between them copies from and to."""
    body = group.body
    if isinstance(body, Call) and getattr(body.op, "name", None) == "device_copy":
        return body.attrs["src_virtual_device"], body.attrs["dst_virtual_device"]
    return None


def _flat_field(
    e: TupleGetItem, ids: dict[Expr, int], views: dict[Expr, tuple[int, int]]
) -> tuple[int, int]:
    """The node a tuple field comes from and its index among that node's tensors: tuples
    reach the executor flattened (a region returning (a, (b, c)) gives a, b, c), so the
    field `.1.0` of it is tensor 1."""
    src = e.tuple_value
    node, offset = views[src] if src in views else (ids[src], 0)
    fields = src.checked_type.fields  # type: ignore[attr-defined]
    return node, offset + sum(len(tensor_types(f)) for f in fields[: e.index])


def _tensor_outputs(
    nodes: list[Node], outputs: list[tuple[int, int]], leaves: list[Expr], tree: Any
) -> tuple[list[int], Any]:
    """Main's outputs as tensors: a result leaf of tuple type (a region or a multi-output
    kernel returning `(a, (b, c))`) becomes a field node per tensor it holds, and the output
    tree nests them as its type does, so the executable returns what the interpreter does."""
    flat: list[int] = []
    subtrees: list[Any] = []
    for (node_id, offset), leaf in zip(outputs, leaves, strict=True):
        t = leaf.checked_type
        if isinstance(t, TensorType):
            subtrees.append(len(flat))
            flat.append(node_id)
            continue
        start = len(flat)
        for k, field_type in enumerate(tensor_types(t)):
            field = FieldNode(
                len(nodes), "field", (node_id,), field_type.shape, field_type.dtype, offset + k
            )
            nodes.append(field)
            flat.append(field.id)
        subtrees.append(_type_tree(t, start))
    return flat, nest(tree, subtrees)  # each leaf of the syntactic tree by its subtree


def _type_tree(t: Any, start: int) -> Any:
    """The nesting of a tuple type with its tensors numbered from `start` in flattening
    order."""
    counter = iter(range(start, start + len(tensor_types(t))))

    def walk(x: Any) -> Any:  # recursion over tuple nesting only, never dataflow depth
        return next(counter) if isinstance(x, TensorType) else tuple(walk(f) for f in x.fields)

    return walk(t)
