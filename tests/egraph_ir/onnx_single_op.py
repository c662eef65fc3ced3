"""Run one ONNX operator with onnxruntime: the independent reference for op tests."""

from __future__ import annotations

from typing import Any

import numpy as np

onnx = __import__("pytest").importorskip("onnx")
ort = __import__("pytest").importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

OPSET = 21


def run_onnx(*args: Any, **kwargs: Any) -> list[np.ndarray]:
    """Evaluate one op (the arguments of single_op_model) with onnxruntime."""
    return run_model(*single_op_model(*args, **kwargs))


def run_model(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def single_op_model(
    op_type: str,
    inputs: list[np.ndarray | None],
    attrs: dict[str, Any] | None = None,
    n_outputs: int = 1,
    initializers: dict[int, np.ndarray] | None = None,
    out_dtype: Any = None,
) -> tuple[Any, dict[str, np.ndarray]]:
    """A one-node ONNX model of `op_type` and the feeds for its graph inputs; entries of
    `initializers` (by input position) are constant inputs such as shapes and axes; None
    inputs are omitted optional inputs."""
    initializers = initializers or {}
    names, graph_inputs, inits, feeds = [], [], [], {}
    total = max([len(inputs) - 1, *initializers]) + 1 if (inputs or initializers) else 0
    for i in range(total):
        name = f"in{i}"
        if i in initializers:
            inits.append(numpy_helper.from_array(np.asarray(initializers[i]), name))
            names.append(name)
        elif i < len(inputs) and inputs[i] is not None:
            arr = np.asarray(inputs[i])
            graph_inputs.append(
                helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape
                )
            )
            feeds[name] = arr
            names.append(name)
        else:
            names.append("")
    outs = [f"out{i}" for i in range(n_outputs)]
    first = next(a for a in [*inputs, *initializers.values()] if a is not None)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype or np.asarray(first).dtype))
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "single",
        graph_inputs,
        [helper.make_tensor_value_info(o, elem, None) for o in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    return model, feeds
