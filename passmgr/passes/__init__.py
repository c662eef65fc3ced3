"""The standard passes, each registered under its class name, and the typed reports they
record in the run (`ctx.run.last("FuseOps")`, `PassRun.reports(kind=EqSatReport)`)."""

from __future__ import annotations

from .block_layout import BlockLayout
from .canonicalize_qnn import CanonicalizeQnn, QnnReport
from .combine_parallel_dense import CombineParallelDense, CombineReport
from .dead_code import DeadCodeElimination, DeadCodeReport
from .devices import DevicePlanReport, PlanDevices, device_map
from .eqsat import (
    AlgebraicSimplify,
    CastCanonicalize,
    EliminateCommonSubexpr,
    EqSat,
    EqSatReport,
    FakeQuantizationToInteger,
    FoldScaleAxis,
    SimplifyInference,
)
from .expand_mlas import ExpandMlasOrder, MlasReport
from .fold_constant import FoldConstant, FoldReport
from .fuse_ops import FuseOps, FuseReport
from .infer_type import InferType
from .inline import Inline, InlineReport
from .onnxruntime_sums import OnnxRuntimeSums, SumsReport
from .partition import (
    AnnotateReport,
    AnnotateTarget,
    CompositeReport,
    MergeCompilerRegions,
    MergeComposite,
    MergeRegionsReport,
    PartitionGraph,
    PartitionReport,
    PlacementChoice,
    PlacementCost,
    PlacementReport,
    PlaceTargets,
    RegionReport,
    cost_table,
    partition_for,
    placement_report,
    register_region_optimizer,
)
from .print_ir import PrintIR
from .tabulate import TabulateByteFunctions, TabulateReport

__all__ = [
    "BlockLayout",
    "CanonicalizeQnn",
    "OnnxRuntimeSums",
    "ExpandMlasOrder",
    "MlasReport",
    "QnnReport",
    "SumsReport",
    "FakeQuantizationToInteger",
    "Inline",
    "InlineReport",
    "AnnotateReport",
    "CombineReport",
    "CompositeReport",
    "DeadCodeReport",
    "DevicePlanReport",
    "EqSatReport",
    "FoldReport",
    "FuseReport",
    "MergeRegionsReport",
    "PartitionReport",
    "PlacementChoice",
    "AnnotateTarget",
    "MergeComposite",
    "MergeCompilerRegions",
    "PartitionGraph",
    "PlaceTargets",
    "PlacementCost",
    "PlacementReport",
    "RegionReport",
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
    "TabulateByteFunctions",
    "TabulateReport",
]
