"""Compute definitions: each op's output element as a scalar loop-IR expression
(definitions.py), with the gathering ops (gather.py) and requantize (qnn.py) beside it."""
