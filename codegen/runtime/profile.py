"""A profile of a run, kernel by kernel (Executable.profile): each kernel's median time,
spread, rates and share, as a table, by op, and as a Chrome trace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..lower.kinds import kernel_label


@dataclass(frozen=True)
class KernelTime:
    """One kernel's share of a profiled run. `seconds` is the median over the runs,
    `low`/`high` the 10th and 90th percentiles (the spread on a noisy machine)."""

    name: str
    kind: str
    ops: list[str]
    seconds: float
    low: float
    high: float
    flops: float
    bytes: float
    share: float  # of the summed kernel medians
    variant: str = ""  # which kernel of its kind (a convolution's: direct, channels, ...)
    order: int = 0  # its place in the run (kernels run one after another)
    shape: tuple[int, ...] | None = None  # of its result
    sources: tuple[str, ...] = ()  # the model's nodes it computes (ONNX node names)
    predicted: float = 0.0  # seconds the `kernels` cost model estimated (0: not known)
    layout: str = ""  # of its result (NCHW, NCHW16c, ...; "": not a laid-out tensor)

    @property
    def computes(self) -> str:
        """What it computes, for a table: its first model node and how many more (the
        trace and JSON list them all), or its ops for a model without node names."""
        if not self.sources:
            return ", ".join(self.ops)
        more = f" (+{len(self.sources) - 1})" if len(self.sources) > 1 else ""
        return self.sources[0] + more

    @property
    def label(self) -> str:
        """Its kind and variant, as tables and traces show them (conv/direct, loops)."""
        return kernel_label(self.kind, self.variant)

    @property
    def gflops_per_s(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gbytes_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


@dataclass
class Profile:
    """Per-kernel times of `Executable.profile`, slowest first; `str()` gives a table."""

    kernels: list[KernelTime] = field(default_factory=list)
    repeats: int = 0
    sizes: dict[str, int] = field(default_factory=dict)  # a symbolic program's, as measured

    def __iter__(self) -> Any:
        return iter(self.kernels)

    def __len__(self) -> int:
        return len(self.kernels)

    @property
    def total_seconds(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def rows(self) -> list[list[str]]:
        """Table cells: kernel, kind, what it computes, result shape (five axes: NCHW16c),
        median us, what the `kernels` cost model predicted, p10-p90 us, GFLOP/s, GB/s,
        share."""
        out = []
        for k in self.kernels:
            out.append(
                [
                    k.name,
                    k.label,
                    k.computes,
                    "x".join(map(str, k.shape)) if k.shape is not None else "",
                    f"{1e6 * k.seconds:.1f}",
                    f"{1e6 * k.predicted:.1f}" if k.predicted else "",
                    f"{1e6 * k.low:.1f}-{1e6 * k.high:.1f}",
                    f"{k.gflops_per_s:.2f}",
                    f"{k.gbytes_per_s:.2f}",
                    f"{100 * k.share:.1f}%",
                ]
            )
        return out

    HEADER = (
        "kernel", "kind", "computes", "shape", "median us", "predicted us", "p10-p90 us",
        "GFLOP/s", "GB/s", "share",
    )  # fmt: skip

    def __str__(self) -> str:
        total = f"total {1e6 * self.total_seconds:.1f} us over {len(self)} kernels"
        return aligned(self.HEADER, self.rows()) + "\n" + total

    def by_op(self) -> list[tuple[str, int, float]]:
        """(kind and first op, kernels, summed median seconds), largest first: where the
        time goes by kind of work."""
        totals: dict[str, list[float]] = {}
        for k in self.kernels:
            entry = totals.setdefault(f"{k.label} {k.ops[0] if k.ops else ''}".strip(), [0, 0.0])
            entry[0] += 1
            entry[1] += k.seconds
        rows = [(name, int(n), s) for name, (n, s) in totals.items()]
        return sorted(rows, key=lambda r: -r[2])

    def trace(self) -> dict[str, Any]:
        """A Chrome trace (the JSON ONNX Runtime's and PyTorch's profilers write; Perfetto
        and chrome://tracing open it): the kernels in run order, each its median long."""
        events: list[dict[str, Any]] = []
        at = 0.0
        for k in sorted(self.kernels, key=lambda k: k.order):
            args = {"ops": ",".join(k.ops), "shape": list(k.shape or ()), "flops": k.flops}
            args["nodes"] = list(k.sources)
            events.append(
                {
                    "name": k.name, "cat": k.label,
                    "ph": "X", "ts": 1e6 * at, "dur": 1e6 * k.seconds, "pid": 0, "tid": 0,
                    "args": args,
                }
            )  # fmt: skip
            at += k.seconds
        return {"traceEvents": events, "displayTimeUnit": "ms"}


def aligned(header: Sequence[str], rows: list[list[str]]) -> str:
    """A plain-text table: columns padded to their widest cell."""
    cells = [list(header), *rows]
    widths = [max(len(r[c]) for r in cells) for c in range(len(header))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells)
    return "\n".join(line.rstrip() for line in lines)


__all__ = ["KernelTime", "Profile", "aligned"]
