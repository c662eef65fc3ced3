"""This CPU's kernel timings: one store, read by the layout cost model (which form of a
convolution to extract) and by the kernel chooser (which kernel lowers it).

One JSON file per CPU in the project's cache folder (egraph_ir/cache.py), named by the
host CPU and a digest of its features, since the generated code depends on both:

    {"format": 2, "cpu": "znver4-1a2b3c4d",
     "times": {shape key: {kernel NAME: seconds}},    # egc tune
     "rates": {form: GFLOP/s}}                          # egc tune --layouts

A shape key names one op call's shapes and attributes (kernel_cost.kernel_key), a kernel
NAME one kernel of codegen/lower/kernels/ ("conv/direct"). Written by `egc tune`
(codegen/measure/), merged, later entries winning; an absent file is an empty store.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from .cache import cache_root
from .errors import CodegenError

FORMAT = 2


@cache
def native_16_lanes() -> bool:
    """Whether the host holds 16 float32 lanes in one register (AVX-512): the kernels'
    measured rates differ by it (egraph_ir/egraph/kernel_cost.py)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


@cache
def host_has_vnni() -> bool:
    """Whether the host multiplies bytes into int32 sums natively (AVX-512 VNNI): the
    blocked int8 kernels need it."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    return bool(llvm.get_host_cpu_features().get("avx512vnni", False))


@cache
def cpu_id() -> str:
    """The host CPU's name and a digest of its features (what the generated code uses)."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features().flatten()
    return f"{llvm.get_host_cpu_name()}-{hashlib.sha256(features.encode()).hexdigest()[:8]}"


def default_path() -> Path:
    """This CPU's store in the project's cache folder."""
    return cache_root() / f"kernels-{cpu_id()}.json"


@dataclass
class KernelTimes:
    """Measured seconds per shape key and kernel NAME, and GFLOP/s per form, for one CPU."""

    path: Path
    cpu: str = field(default_factory=cpu_id)
    times: dict[str, dict[str, float]] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def open(path: Path) -> KernelTimes:
        """The store at path (empty when there is no file yet); a damaged one is a clear
        CodegenError naming the file."""
        if not path.exists():
            return KernelTimes(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CodegenError(f"kernel timings {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CodegenError(f"kernel timings {path}: not a store of format {FORMAT}")
        try:
            times = {
                str(k): {str(n): float(s) for n, s in v.items()}
                for k, v in data.get("times", {}).items()
            }
            rates = {str(k): float(v) for k, v in data.get("rates", {}).items()}
        except (ValueError, AttributeError, TypeError) as exc:
            raise CodegenError(f"kernel timings {path}: {exc}") from None
        return KernelTimes(path, str(data.get("cpu", "")), times, rates)

    def save(self) -> None:
        """Write atomically (a temporary file beside it, then renamed)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"format": FORMAT, "cpu": self.cpu, "times": self.times, "rates": self.rates}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)
        this_cpu.cache_clear()

    def record(self, key: str, seconds: Mapping[str, float]) -> None:
        """Kernel NAME -> seconds for one shape key, merged over what was there."""
        self.times[key] = {**self.times.get(key, {}), **seconds}

    def fastest(self, key: str, candidates: Sequence[str]) -> str | None:
        """The fastest candidate when all of them were measured for key, else None."""
        measured = self.times.get(key, {})
        if not candidates or any(c not in measured for c in candidates):
            return None
        return min(candidates, key=lambda c: measured[c])

    def best_seconds(self) -> dict[str, float]:
        """Per shape key the fastest measured kernel's seconds (what the cost model prices)."""
        return {k: min(v.values()) for k, v in self.times.items() if v}


@cache
def this_cpu() -> KernelTimes:
    """This CPU's store as it is on disk (empty where `egc tune` never ran, or where the
    file is unreadable: the cost model then keeps its documented defaults)."""
    try:
        store = KernelTimes.open(default_path())
    except CodegenError:
        return KernelTimes(default_path())
    return store if store.cpu == cpu_id() else KernelTimes(default_path())
