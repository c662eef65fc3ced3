"""An ONNX backend (`onnx.backend.base.Backend`), so ONNX's own conformance suite runs as is.

    import onnx.backend.test
    from egc.onnx_backend import EgcBackend
    suite = onnx.backend.test.BackendTest(EgcBackend, __name__)

`prepare` imports the model (`from_onnx`, honouring `shapes=`) and compiles it
(`codegen.build`); with `mode="interpret"` it runs the reference interpreter instead. A
model with symbolic dimensions stays symbolic without `shapes=`: one prepared model runs
inputs of every consistent shape (codegen.SymbolicExecutable).
`run_node` runs one NodeProto. Devices other than the CPU are refused. Inputs are matched to the
graph's inputs by position (initialisers listed as inputs are skipped), outputs come back
as a list in the graph's order, as the runner expects. `run_model`, which sees the inputs,
binds an input that sets a static attribute (a shape, axes, bounds) as a constant, as a
backend that specialises on such values does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
from onnx.backend.base import Backend, BackendRep

from codegen.build import build
from egraph_ir.errors import CodegenError, ConstantInputError, FrontendError
from egraph_ir.frontend import from_onnx
from egraph_ir.interp import interpret
from egraph_ir.module import IRModule


class EgcRep(BackendRep):
    """A prepared model: `run(inputs)` returns the outputs as a list."""

    def __init__(self, mod: IRModule, mode: str) -> None:
        self.mod = mod
        self.names = [p.name_hint for p in mod["main"].params]
        self.exe = build(mod) if mode == "compiled" else None

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = {k: np.asarray(v) for k, v in inputs.items() if k in self.names}
        else:
            values = list(inputs) if isinstance(inputs, Sequence) else [inputs]
            feeds = dict(zip(self.names, (np.asarray(v) for v in values), strict=False))
        if self.exe is not None:
            out = self.exe(**feeds)
        else:
            out = interpret(self.mod, **feeds)
        return tuple(out) if isinstance(out, tuple) else (out,)


class EgcBackend(Backend):
    """ONNX backend over this compiler (CPU only)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> EgcRep:
        """Import and compile; `shapes={"input": (1, 3, 224, 224)}` fixes symbolic
        dimensions (as `from_onnx(shapes=)`), which otherwise stay symbolic."""
        _check_device(device)
        super().prepare(model, device, **kwargs)
        mod = from_onnx(model, shapes=kwargs.get("shapes"))
        return EgcRep(mod, kwargs.get("mode", "compiled"))

    @classmethod
    def run_model(
        cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        """Import, compile and run. Knowing the inputs, an input that sets a static
        attribute (Reshape's shape, Reduce's axes, Clip's bounds) is bound as a constant
        and the model imported again: the executable is specialised to that value."""
        _check_device(device)
        super().prepare(model, device, **kwargs)
        feeds = _by_name(model, inputs)
        while True:
            try:
                mod = from_onnx(model)
                break
            except ConstantInputError as exc:  # specialise on the inputs it is made from
                if not exc.inputs or any(name not in feeds for name in exc.inputs):
                    raise
                for name in exc.inputs:
                    model = _bind(model, name, feeds.pop(name))
        return EgcRep(mod, kwargs.get("mode", "compiled")).run(feeds)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, Sequence[int]]] | None = None,
        **kwargs: Any,
    ) -> tuple[np.ndarray, ...]:
        """One node on its inputs: wrapped in a one-node model of the current opset (or
        `opset_version=`) and run as `run_model` does."""
        _check_device(device)
        model = _node_model(node, [np.asarray(v) for v in inputs], outputs_info, kwargs)
        return cls.run_model(model, inputs, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU only ("CPU" or "CPU:0")."""
        return str(device).split(":")[0].upper() == "CPU"


def _check_device(device: str) -> None:
    if not EgcBackend.supports_device(device):
        raise CodegenError(f"device {device!r}: this backend compiles for the CPU only")


def _node_model(
    node: Any,
    values: list[np.ndarray],
    outputs_info: Sequence[tuple[Any, Sequence[int]]] | None,
    options: dict[str, Any],
) -> Any:
    """A model holding just `node`, its inputs typed after `values`."""
    helper = onnx.helper
    names = [n for n in node.input if n]
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in zip(names, values, strict=False)
    ]
    outputs = []
    for k, name in enumerate(n for n in node.output if n):
        if outputs_info and k < len(outputs_info):
            dtype, shape = outputs_info[k]
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            outputs.append(helper.make_tensor_value_info(name, elem, shape))
        else:
            outputs.append(onnx.ValueInfoProto(name=name))  # typed by shape inference
    graph = helper.make_graph([node], "run_node", inputs, outputs)
    opset = options.pop("opset_version", None) or onnx.defs.onnx_opset_version()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain or "", opset)])
    return onnx.shape_inference.infer_shapes(model)


def _by_name(model: Any, inputs: Any) -> dict[str, np.ndarray]:
    """The runner's inputs (a list in graph-input order, or a dict) by input name; only
    tensors (ONNX sequences, maps and optionals are not supported)."""
    if isinstance(inputs, dict):
        pairs = list(inputs.items())
    else:
        constants = {init.name for init in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in constants]
        values = list(inputs) if isinstance(inputs, Sequence) else [inputs]
        pairs = list(zip(names, values, strict=False))
    pairs = [
        (k, onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v)
        for k, v in pairs
    ]
    for name, value in pairs:
        if not isinstance(value, np.ndarray | np.generic | int | float | bool):
            raise FrontendError(
                f"input '{name}' is a {type(value).__name__}: only tensor inputs are supported "
                "(not ONNX sequences, maps or optionals)"
            )
    return {k: np.asarray(v) for k, v in pairs}


def _bind(model: Any, name: str, value: np.ndarray) -> Any:
    """A copy of `model` whose graph input `name` is an initialiser holding `value`."""
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    kept = [i for i in bound.graph.input if i.name != name]
    del bound.graph.input[:]
    bound.graph.input.extend(kept)
    bound.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    return bound


class InterpretBackend(EgcBackend):
    """The same, through the reference interpreter (no compilation)."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> EgcRep:
        return super().prepare(model, device, mode="interpret", **kwargs)

    @classmethod
    def run_model(
        cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return super().run_model(model, inputs, device, mode="interpret", **kwargs)
