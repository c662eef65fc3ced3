"""Partitioning for several targets (TVM's BYOC flow, seed 002): MergeComposite groups
patterns into composite calls, AnnotateTarget marks each call with its target,
MergeCompilerRegions joins neighbouring regions of one target without creating cycles, and
PartitionGraph lifts each region into a global function that the target's code generator
compiles (codegen.register_external)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rules.patterns import BUILTIN_DIR

from ...pass_base import Pass
from ...sequential import Sequential
from .annotate_target import AnnotateReport, AnnotateTarget
from .merge_composite import CompositeReport, MergeComposite
from .merge_regions import MergeCompilerRegions, MergeRegionsReport
from .partition_graph import PartitionGraph, PartitionReport, register_region_optimizer
from .placement.model import PlacementCost, cost_table
from .placement.report import PlacementReport, RegionReport
from .placement.targets import PlacementChoice, PlaceTargets, placement_report


def partition_for(
    targets: Sequence[str], table: Any = None, bind_constants: bool = True
) -> Sequential:
    """The whole flow for a list of targets (first = highest priority): MergeComposite with
    `table` (default: the shipped tables of the chosen targets, e.g. blas.patterns),
    AnnotateTarget, MergeCompilerRegions and PartitionGraph."""
    targets = [targets] if isinstance(targets, str) else list(targets)
    if table is None:
        table = []
        for t in targets:
            if (BUILTIN_DIR / f"{t}.patterns").exists():
                table += MergeComposite(t).patterns
    passes: list[Pass] = [MergeComposite(table)] if table else []
    passes += [
        AnnotateTarget(targets),
        MergeCompilerRegions(),
        PartitionGraph(bind_constants=bind_constants),
    ]
    return Sequential(passes, name="PartitionFor")


__all__ = [
    "AnnotateReport",
    "CompositeReport",
    "MergeRegionsReport",
    "PartitionReport",
    "PlacementChoice",
    "partition_for",
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
    "register_region_optimizer",
]
