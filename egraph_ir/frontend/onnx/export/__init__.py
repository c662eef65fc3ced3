"""IR to ONNX: the model and its opset (model.py), the graph walk (graph.py) and the op
converters (ops.py)."""
