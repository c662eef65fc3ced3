"""The `onnxruntime` target: a region becomes an ONNX graph run by its own ONNX Runtime
session.

The region is written with the project's exporter (`to_onnx`, composites inlined first)
and loaded into a session with the executable's thread budget and without spinning
workers (they would take a core from the kernels that run next). Inputs and outputs are
bound to the executable's buffers with IOBinding, so ONNX Runtime reads and writes them
in place.
"""

from __future__ import annotations

import numpy as np

from egraph_ir.errors import CodegenError, require
from egraph_ir.expr import Function
from egraph_ir.frontend.onnx import to_onnx
from egraph_ir.inline import inline_function

from . import Runner


def build(fn: Function, threads: int) -> Runner:
    ort = require("onnxruntime", "the onnxruntime target")
    plain = inline_function(Function(fn.params, fn.body, fn.ret_type))
    model = to_onnx(plain, name=str(fn.attrs.get("global_symbol", "region")))
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # ONNX Runtime raises its own exception types
        raise CodegenError(f"ONNX Runtime refused the region: {exc}") from None
    used = {i.name for i in session.get_inputs()}  # an input the graph never reads may go
    in_names = [p.name_hint for p in plain.params]
    out_names = [o.name for o in session.get_outputs()]
    binding = session.io_binding()

    def run(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        for name, a in zip(in_names, inputs, strict=True):
            if name in used:
                binding.bind_input(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)
        for name, o in zip(out_names, outputs, strict=True):
            binding.bind_output(name, "cpu", 0, o.dtype, list(o.shape), o.ctypes.data)
        session.run_with_iobinding(binding)

    return run
