"""The standard passes, each registered under its class name."""

from __future__ import annotations

from .combine_parallel_dense import CombineParallelDense
from .dead_code import DeadCodeElimination
from .devices import PlanDevices, device_map
from .eqsat import (
    AlgebraicSimplify,
    CastCanonicalize,
    EliminateCommonSubexpr,
    EqSat,
    FoldScaleAxis,
    SimplifyInference,
)
from .fold_constant import FoldConstant
from .fuse_ops import FuseOps
from .infer_type import InferType
from .partition import (
    AnnotateTarget,
    MergeCompilerRegions,
    MergeComposite,
    PartitionGraph,
    PlacementCost,
    PlaceTargets,
    cost_table,
    partition_for,
    placement_report,
    register_region_optimizer,
)
from .print_ir import PrintIR

__all__ = [
    "AnnotateTarget",
    "MergeComposite",
    "MergeCompilerRegions",
    "PartitionGraph",
    "PlaceTargets",
    "PlacementCost",
    "cost_table",
    "placement_report",
    "partition_for",
    "register_region_optimizer",
    "AlgebraicSimplify",
    "CastCanonicalize",
    "CombineParallelDense",
    "DeadCodeElimination",
    "EliminateCommonSubexpr",
    "EqSat",
    "FoldConstant",
    "FoldScaleAxis",
    "FuseOps",
    "InferType",
    "PlanDevices",
    "PrintIR",
    "device_map",
    "SimplifyInference",
]
