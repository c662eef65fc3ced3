"""An ONNX backend (`onnx.backend.base.Backend`), so ONNX's own conformance suite runs as is.

    import onnx.backend.test
    from egc.onnx_backend import EgcBackend
    suite = onnx.backend.test.BackendTest(EgcBackend, __name__)

`prepare` imports the model (`from_onnx`) and compiles it (`codegen.build`); with
`mode="interpret"` it runs the reference interpreter instead. Inputs are matched to the
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
from egraph_ir.errors import ConstantInputError, FrontendError
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
        super().prepare(model, device, **kwargs)
        return EgcRep(from_onnx(model), kwargs.get("mode", "compiled"))

    @classmethod
    def run_model(
        cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        """Import, compile and run. Knowing the inputs, an input that sets a static
        attribute (Reshape's shape, Reduce's axes, Clip's bounds) is bound as a constant
        and the model imported again: the executable is specialised to that value."""
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
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


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
