"""Export IR to ONNX: `to_onnx(mod)` writes main (dataflow only) as an ONNX model.

Shapes are static here, so every shape-only op (reshape, flatten, squeeze, expand_dims)
becomes a Reshape to its known result shape, and creation ops become initialisers. Ops
whose ONNX form needs a newer opset than the target (GELU, group norm) are written as their
defining formulas. Each converter gets the typed call and returns the output names; the
walk over the dataflow is iterative, so deep graphs export without recursion.
"""

from __future__ import annotations

from typing import Any

from ....errors import FrontendError
from ....expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from ....infer import infer_type
from ....module import IRModule
from ....registry import Op
from ....types import TensorType, tensor_types
from ....visitor import post_order
from .graph import OPSET, ExportGraph, elem_type
from .ops import convert


def to_onnx(mod: IRModule | Function, opset: int = OPSET, name: str = "egc") -> Any:
    """main as an ONNX ModelProto (checked by onnx.checker). Inputs keep their names;
    outputs take main's `output_names` (set by ONNX import) or output0, output1, ..."""
    import onnx

    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    mod = infer_type(mod)
    fn = mod["main"]
    g = ExportGraph(onnx)
    values: dict[Expr, list[str]] = {}
    inputs = []
    for p in fn.params:
        t = p.checked_type
        if not isinstance(t, TensorType):
            raise FrontendError(f"to_onnx: input %{p.name_hint} is {t}; only tensors export")
        values[p] = [p.name_hint]
        info = onnx.helper.make_tensor_value_info(p.name_hint, elem_type(onnx, t.dtype), t.shape)
        inputs.append(info)
    missing: dict[str, int] = {}
    for e in post_order(fn.body, into_functions=False):
        if e in values:
            continue
        if isinstance(e, Constant):
            values[e] = [g.const(e.data)]
        elif isinstance(e, Call) and isinstance(e.op, Op):
            args = [values[a] for a in e.args]
            if any(len(a) != 1 for a in args):
                raise FrontendError(f"to_onnx: {e.op.name} takes a tuple argument")
            try:
                values[e] = convert(g, e, [a[0] for a in args])
            except FrontendError:
                missing[e.op.name] = missing.get(e.op.name, 0) + 1
                values[e] = ["?"]
        elif isinstance(e, Tuple):
            values[e] = [n for f in e.fields for n in values[f]]
        elif isinstance(e, TupleGetItem):
            values[e] = [values[e.tuple_value][e.index]]
        elif isinstance(e, Var):
            raise FrontendError(f"to_onnx: free variable %{e.name_hint}")
        else:
            raise FrontendError(
                f"to_onnx: {type(e).__name__} nodes do not export; only dataflow (calls of "
                "ops, tuples) does — run the function-level passes first, not FuseOps"
            )
    if missing:
        ops = ", ".join(f"{k} (x{v})" for k, v in sorted(missing.items()))
        raise FrontendError(f"to_onnx: no ONNX form for: {ops}")
    results = values[fn.body]
    types = tensor_types(fn.body.checked_type)
    names = [str(n) for n in fn.attrs.get("output_names", ())]
    if len(names) != len(results):
        names = [f"output{i}" for i in range(len(results))]
    outputs = []
    for result, out_name, ot in zip(results, names, types, strict=True):
        g.nodes.append(onnx.helper.make_node("Identity", [result], [out_name]))
        info = onnx.helper.make_tensor_value_info(out_name, elem_type(onnx, ot.dtype), ot.shape)
        outputs.append(info)
    graph = onnx.helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 9)  # what onnxruntime 1.18+ reads
    onnx.checker.check_model(model)
    return model
