"""The standard optimisation pipeline, one line per pass with why it sits there."""

from __future__ import annotations

from . import passes as p
from .sequential import Sequential


def standard_pipeline() -> Sequential:
    """Inference simplification and rule-based clean-up, as codegen.build runs it."""
    return Sequential(
        [
            p.InferType(),  # every later pass reads checked types
            p.SimplifyInference(),  # batch/layer norm and dropout into plain arithmetic
            p.FakeQuantizationToInteger(),  # QDQ chains as integer ops, as ONNX Runtime runs them
            p.OnnxRuntimeSums(),  # uint8 x int8 sums as ONNX Runtime's kernels here sum them
            p.CanonicalizeQnn(),  # quantised ops as arithmetic the code generator compiles
            p.FoldConstant(),  # precompute the statistics those rules produced, shifted weights
            p.FoldScaleAxis(),  # fold per-channel scales/shifts into conv2d weights and bias
            p.AlgebraicSimplify(),  # identities, involutions, layout canonicalisation
            p.CastCanonicalize(),  # drop redundant casts
            p.TabulateByteFunctions(),  # a quantised SiLU's byte-to-byte chain as one table
            p.BlockLayout(),  # NCHW16c where the measured kernels beat the conversions
            p.CombineParallelDense(),  # Q/K/V-style products over one input become one
            p.EliminateCommonSubexpr(),  # hash-consing: equal computations once
            p.DeadCodeElimination(),  # unused bindings and functions
            p.ExpandMlasOrder(),  # float convolutions in ONNX Runtime's order, now, not before
        ],
        name="StandardPipeline",
    )
