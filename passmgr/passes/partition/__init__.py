"""Partitioning for several targets (TVM's BYOC flow, seed 002): MergeComposite groups
patterns into composite calls, AnnotateTarget marks each call with its target,
MergeCompilerRegions joins neighbouring regions of one target without creating cycles, and
PartitionGraph lifts each region into a global function that the target's code generator
compiles (codegen.register_external)."""

from __future__ import annotations

from .annotate_target import AnnotateTarget
from .merge_composite import MergeComposite
from .merge_regions import MergeCompilerRegions
from .partition_graph import PartitionGraph, register_region_optimizer

__all__ = [
    "AnnotateTarget",
    "MergeComposite",
    "MergeCompilerRegions",
    "PartitionGraph",
    "register_region_optimizer",
]
