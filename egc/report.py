"""The compile job's report, typed: what `egc compile` and `egc demo` print.

A frozen `CompileReport` built by egc/job.py; `to_json()` is the one place it becomes plain
data (`--json`, the compile cache) and `from_json` the one place it is read back (a cache
hit). The text view (job.render_text) reads the dataclass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProgramSummary:
    """A program's size: op calls, FLOPs, bytes moved, calls per op, constant elements."""

    op_calls: int
    flops: float
    bytes_moved: float
    ops: dict[str, int]
    parameters: int


@dataclass(frozen=True)
class EqSatLine:
    """One EqSat pass of the pipeline: rewrites, e-graph size, why it stopped, extraction."""

    pass_name: str
    rules_applied: int
    enodes: int
    stop: str
    extractor: str
    cost_before: float
    cost_after: float
    # per rule that matched: name, matches, applications, share of the cost change (with
    # --report: eqsat.attribution), largest share first
    rules: tuple[tuple[str, int, int, float | None], ...] = ()


@dataclass(frozen=True)
class PassesReport:
    """The passes that ran: their timing tree, the EqSat lines, other passes' summaries."""

    timing: dict[str, Any]
    eqsat: tuple[EqSatLine, ...] = ()
    statistics: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class MemoryReport:
    """The static memory plan: arena bytes against the lower bound and one buffer each."""

    arena_bytes: int
    lower_bound: int
    naive_bytes: int
    method: str


@dataclass(frozen=True)
class InterpreterCheck:
    """The compiled program's outputs against the reference interpreter's."""

    max_abs_error: float
    within_tolerance: bool
    exactness: str  # "bit for bit", "within one quantum" or "tolerance"


@dataclass(frozen=True)
class OrtCheck:
    """The compiled program's outputs against ONNX Runtime's, and its latency when timed."""

    max_abs_error: float
    agrees: bool
    exactness: str
    latency_ms: float | None = None


@dataclass(frozen=True)
class CompileReport:
    """What one compile did and, when asked, how its program ran and compared."""

    model: str
    kind: str  # "built-in" or "onnx"
    opt_level: int
    inputs: dict[str, str]
    import_ms: float
    compile_ms: float
    compile_stages_ms: dict[str, float]
    before: ProgramSummary
    after: ProgramSummary
    passes: PassesReport
    kernels: dict[str, int]
    regions: list[dict[str, Any]]
    memory: MemoryReport
    ok: bool = True
    sizes: dict[str, int] | None = None  # a symbolic program: the sizes reported and run at
    # what a run measured (--check, --repeats): never kept in the compile cache
    backend: str | None = None
    latency_ms: float | None = None
    check_original: InterpreterCheck | None = None
    onnxruntime: OrtCheck | None = None
    profile: list[dict[str, Any]] | None = None
    choices: list[str] | None = None
    # files written and where the compile came from
    saved: str | None = None
    dot: str | None = None
    egraph_dot: str | None = None
    onnx: str | None = None
    cache: str | None = None  # "hit" when the compile cache answered

    RUN_FIELDS = ("backend", "latency_ms", "check_original", "onnxruntime", "profile", "choices")

    def with_(self, **changes: Any) -> CompileReport:
        """A copy with some fields changed (the report is frozen)."""
        return dataclasses.replace(self, **changes)

    def without_run(self) -> CompileReport:
        """The report of the compile alone (what the compile cache keeps)."""
        return self.with_(**dict.fromkeys(self.RUN_FIELDS), saved=None, ok=True)

    def to_json(self) -> dict[str, Any]:
        """Plain data (JSON-ready); fields that are None are left out."""
        data = dataclasses.asdict(self)
        if self.onnxruntime is not None and self.onnxruntime.latency_ms is None:
            del data["onnxruntime"]["latency_ms"]
        data["passes"]["eqsat"] = [
            {("pass" if k == "pass_name" else k): v for k, v in line.items()}
            for line in data["passes"]["eqsat"]
        ]
        return {k: v for k, v in data.items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompileReport:
        """The report `to_json` wrote (a compile cache entry)."""
        passes = data["passes"]
        eqsat = tuple(
            EqSatLine(**{("pass_name" if k == "pass" else k): v for k, v in line.items()})
            for line in passes.get("eqsat", [])
        )
        checks: dict[str, Any] = {}
        if "check_original" in data:
            checks["check_original"] = InterpreterCheck(**data["check_original"])
        if "onnxruntime" in data:
            checks["onnxruntime"] = OrtCheck(**data["onnxruntime"])
        known = {f.name for f in dataclasses.fields(cls)}
        plain = {k: v for k, v in data.items() if k in known}
        plain.update(
            before=ProgramSummary(**data["before"]),
            after=ProgramSummary(**data["after"]),
            passes=PassesReport(passes["timing"], eqsat, passes.get("statistics", {})),
            memory=MemoryReport(**data["memory"]),
            **checks,
        )
        return cls(**plain)
