"""The main job behind `egc compile` and `egc demo`: import, optimise, run, check, report.

The report is a frozen CompileReport (egc/report.py; `to_json()` for `--json` and the compile
cache); `render_text` formats it for a terminal. Programs are compiled with codegen.build (LLVM) and
checked against the reference interpreter; for ONNX files, ONNX Runtime's latency and results are
measured in the same process for comparison.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import egraph_ir as ir
import passmgr as pm
from codegen.build import Executable, SymbolicExecutable, build, optimise
from codegen.measure.timer import interleaved_medians
from egraph_ir import models
from egraph_ir.compare import mismatch
from egraph_ir.errors import did_you_mean, require
from egraph_ir.specialize import sizes_or_one, static_type
from egraph_ir.summary import input_types, summarize
from passmgr.passes.canonicalize_qnn import import_onnx

from .options import JobOptions
from .report import (
    CompileReport,
    EqSatLine,
    InterpreterCheck,
    MemoryReport,
    OrtCheck,
    PassesReport,
    ProgramSummary,
)


class Progress:
    """Stage messages: a rich spinner on a terminal, plain lines on stderr otherwise."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.console: Any = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console

            self.console = Console(stderr=True)

    @contextmanager
    def stage(self, what: str) -> Iterator[Callable[[str], None]]:
        """A stage; the callable it yields names the current step (a pass, a compile
        stage) on the spinner."""
        if not self.enabled:
            yield lambda step: None
            return
        if self.console is not None:
            with self.console.status(what + " ...") as status:
                yield lambda step: status.update(f"{what}: {step} ...")
            return
        print(f"egc: {what} ...", file=sys.stderr, flush=True)
        yield lambda step: None


def load_model(
    source: str,
    shapes: dict[str, tuple[int, ...]] | None = None,
    config: dict[str, Any] | None = None,
) -> tuple[ir.IRModule, str, dict[str, np.ndarray] | None]:
    """An ONNX file, or the name of a built-in model (with its seeded inputs); `config`'s
    onnx.onnxruntime_float_groups is read as codegen.build reads it."""
    if source in models.NAMES and not Path(source).exists():
        return ir.infer_type(models.get(source)), "built-in", models.example_inputs(source)
    if not Path(source).exists() and not source.endswith(".onnx"):
        raise ir.CompilerError(
            f"{source}: no such file or built-in model{did_you_mean(source, models.NAMES)}; "
            f"built-in models: {', '.join(models.NAMES)}"
        )
    with pm.PassContext(config=config or {}):
        return import_onnx(source, shapes), "onnx", None


def random_inputs(
    mod: ir.IRModule, seed: int, dims: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """Seeded inputs of main's types; size variables take their values from `dims` (1
    where not given)."""
    rng = np.random.default_rng(seed)
    out = {}
    sizes = sizes_or_one(input_types(mod).values(), dims or {})
    for name, symbolic in input_types(mod).items():
        t = static_type(symbolic, sizes)
        assert isinstance(t, ir.TensorType)
        if np.dtype(t.dtype).kind == "f":
            out[name] = rng.standard_normal(t.shape).astype(t.dtype)
        elif t.dtype == "bool":
            out[name] = rng.random(t.shape) < 0.5
        else:
            out[name] = rng.integers(0, 4, size=t.shape).astype(t.dtype)
    return out


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Milliseconds per run: the one timer's statistic (codegen/measure/timer.py) over
    `repeats` runs after one warm-up run."""
    return 1e3 * interleaved_medians({0: fn}, rounds=1, per_round=max(repeats, 1))[0]


def _max_error(actual: Any, expected: Any) -> tuple[float, bool]:
    """Largest absolute difference and whether the outputs agree within tolerance."""
    pairs = (
        list(zip(actual, expected, strict=True))
        if isinstance(expected, list | tuple)
        else [(actual, expected)]
    )
    ok = all(mismatch(a, e) is None for a, e in pairs)
    worst = 0.0
    for a, e in pairs:
        a, e = np.asarray(a), np.asarray(e)
        if a.shape != e.shape:
            return float("inf"), False
        with np.errstate(all="ignore"):
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        worst = max(worst, float(np.nanmax(diff)) if diff.size else 0.0)
    return worst, ok


def _rule_lines(rep: pm.passes.EqSatReport) -> tuple[tuple[str, int, int, float | None], ...]:
    """What each rule that matched did in one EqSat pass (`~rev` rewrites with their
    rule), the rules with the largest share of the cost change first."""
    matches: dict[str, int] = {}
    applied: dict[str, int] = {}
    for counts, into in ((rep.matches, matches), (rep.applied, applied)):
        for name, n in counts.items():
            key = name.removesuffix("~rev")
            into[key] = into.get(key, 0) + n
    lines = [(n, m, applied.get(n, 0), rep.attribution.get(n)) for n, m in matches.items() if m]
    return tuple(sorted(lines, key=lambda r: (-(r[3] or 0.0), -r[2], r[0])))


def _collect(run: pm.PassRun, timing: pm.PassTimingInstrument) -> PassesReport:
    """The run's typed reports for the job's report (EqSat ones as lines of a table)."""
    eqsat = []
    other: dict[str, list[str]] = {}
    for name, rep in run.records:
        if isinstance(rep, pm.passes.EqSatReport):
            if rep.skipped or not rep.stop_reason:
                continue
            eqsat.append(
                EqSatLine(
                    name,
                    rep.rules_applied,
                    rep.enodes,
                    str(rep.stop_reason),
                    f"{rep.extractor} ({rep.status})",
                    rep.cost_before,
                    rep.cost_after,
                    _rule_lines(rep),
                )
            )
        elif summary := rep.summary():
            other.setdefault(name, []).append(summary)
    return PassesReport(timing.to_dict(), tuple(eqsat), other)


class _ShowPass(pm.PassInstrument):
    """Names each pass on the progress spinner as it starts."""

    def __init__(self, show: Callable[[str], None]) -> None:
        self.show = show

    def run_before_pass(self, mod: ir.IRModule, info: pm.PassInfo) -> None:
        self.show(f"pass {info.name}")


def _context(
    opts: JobOptions, timing: pm.PassTimingInstrument, show: Callable[[str], None]
) -> pm.PassContext:
    instruments: list[pm.PassInstrument] = [timing, _ShowPass(show)]
    if opts.print_ir_after:
        instruments.append(pm.PrintIRAfter(passes=opts.print_ir_after))
    return pm.PassContext(
        opt_level=opts.opt_level,
        disabled_pass=opts.disabled,
        instruments=instruments,
        config=opts.config,
    )


def compile_model(
    mod: ir.IRModule, opts: JobOptions, show: Callable[[str], None] = lambda step: None
) -> tuple[Executable | SymbolicExecutable, PassesReport]:
    """codegen.build under the job's context (user rule files as extra EqSat passes);
    `show` hears each pass and compile stage as it starts."""
    timing = pm.PassTimingInstrument()
    extra = [pm.passes.EqSat(rules=path) for path in opts.rules]
    with _context(opts, timing, show) as ctx:
        if opts.targets:  # optimise, then offload: the regions get the optimised program
            mod = optimise(mod, None, extra)
            if opts.place:  # the cheapest placement, measured on this machine or modelled
                from codegen.measure.placement_costs import measured_cost

                cost = measured_cost() if opts.place == "measured" else None
                mod = pm.passes.PlaceTargets(opts.targets, cost=cost)(mod)
            else:
                mod = pm.passes.partition_for(opts.targets)(mod)
        exe = build(mod, extra_passes=extra, on_stage=show)
        if isinstance(exe, SymbolicExecutable):  # checked, timed, reported at --dim sizes
            exe.specialization(**sizes_or_one(input_types(mod).values(), opts.dims))
    return exe, _collect(ctx.run, timing)


def _program_summary(mod: ir.IRModule) -> ProgramSummary:
    s = summarize(mod)
    return ProgramSummary(
        s.num_calls, s.flops, s.bytes_moved, dict(s.ops.most_common()), s.constant_elements
    )


def run_job(
    source: str, opts: JobOptions, progress: Progress | None = None
) -> tuple[CompileReport, Executable | SymbolicExecutable]:
    """Import, optimise and compile one model; with `opts.check` also run it against the
    reference interpreter (and ONNX Runtime for an ONNX file), with `opts.repeats` time it.
    Returns the report and the executable (whose modules the command line prints and draws)."""
    progress = progress or Progress(enabled=False)
    with progress.stage("importing"):
        t0 = time.perf_counter()
        mod, kind, inputs = load_model(source, opts.shapes, opts.config)
        import_ms = 1e3 * (time.perf_counter() - t0)
    with progress.stage("optimising") as update:
        t0 = time.perf_counter()
        exe, passes = compile_model(mod, opts, update)
        compile_ms = 1e3 * (time.perf_counter() - t0)
    sizes = sizes_or_one(input_types(mod).values(), opts.dims) or None  # 1 where not given
    shown = exe.latest() if isinstance(exe, SymbolicExecutable) else exe
    assert shown.module is not None  # a built (not loaded) executable keeps its IR
    plan = shown.memory_plan
    report = CompileReport(
        model=source,
        kind=kind,
        opt_level=opts.opt_level,
        inputs={k: str(t) for k, t in input_types(mod).items()},
        import_ms=import_ms,
        compile_ms=compile_ms,
        compile_stages_ms={k: 1e3 * v for k, v in shown.compile_seconds.items()},
        before=_program_summary(ir.specialize(mod, sizes) if sizes else mod),
        after=_program_summary(shown.module),
        passes=passes,
        kernels=shown.kernel_kinds(),
        regions=shown.regions(),
        memory=MemoryReport(plan.bytes, plan.lower_bound, plan.naive, plan.method),
        sizes=sizes,
    )
    return run_checks(report, exe, (mod, kind, inputs), opts, progress), exe


def run_checks(
    report: CompileReport,
    exe: Executable | SymbolicExecutable,
    model: tuple[ir.IRModule, str, dict[str, np.ndarray] | None],
    opts: JobOptions,
    progress: Progress,
) -> CompileReport:
    """The report with what the options ask beyond compiling: `check` compares the compiled
    program with the reference interpreter (and ONNX Runtime for an ONNX file) and clears
    `ok` on any disagreement; `repeats` times the runs (ours, and ORT's when compared)."""
    if not (opts.check or opts.repeats):
        return report
    mod, kind, inputs = model
    inputs = inputs if inputs is not None else random_inputs(mod, opts.seed, opts.dims)
    changes: dict[str, Any] = {"backend": f"llvm ({exe.threads} threads)"}
    with progress.stage("running"):
        out = exe.run(**inputs)
        if opts.repeats:
            changes["latency_ms"] = _median_ms(lambda: exe.run(**inputs), opts.repeats)
    ok = report.ok
    if opts.check:
        typed = ir.infer_type(mod)
        quanta = _output_quanta(typed)
        with progress.stage("running the reference interpreter"):
            reference = ir.interpret(_integer_forms(typed), **inputs)
            err, within = _max_error(out, reference)
        exactness = _exactness(_listed(out), _listed(reference), quanta)
        within = within or exactness != "tolerance"  # a quantised model may be a quantum off
        changes["check_original"] = InterpreterCheck(err, within, exactness)
        ok = ok and within
        if kind == "onnx":
            with progress.stage("running onnxruntime"):
                ort = _onnxruntime(report.model, inputs, out, opts.repeats, quanta)
            changes["onnxruntime"] = ort
            ok = ok and ort.agrees
    return report.with_(ok=ok, **changes)


def _integer_forms(mod: ir.IRModule) -> ir.IRModule:
    """A quantised model as its integer kernels compute it (FakeQuantizationToInteger,
    then OnnxRuntimeSums: saturating pairs where ONNX Runtime sums so on this CPU): the
    reference a QDQ chain is checked against, as ONNX Runtime runs it too (the float chain
    the ONNX spec spells out is a quantum off at times, more after many layers)."""
    quantised = any(
        isinstance(e, ir.Call) and getattr(e.op, "name", "") == "quantize"
        for e in ir.post_order(mod["main"].body)
    )
    if not quantised:
        return mod
    passes = pm.passes
    integer = [passes.FakeQuantizationToInteger(), passes.InferType(), passes.OnnxRuntimeSums()]
    return pm.Sequential(integer)(mod)


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple) else [value]


def _onnxruntime(
    path: str,
    inputs: dict[str, np.ndarray],
    out: Any,
    repeats: int,
    quanta: list[float | None],
) -> OrtCheck:
    ort = require("onnxruntime", "egc compile --check of an ONNX file")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    expected = session.run(None, inputs)
    ours = list(out) if isinstance(out, tuple) else [out]
    err, ok = _max_error(ours, expected)
    exactness = _exactness(ours, expected, quanta)
    ok = ok or exactness != "tolerance"  # a quantised model may be a quantum off (and says so)
    latency = _median_ms(lambda: session.run(None, inputs), repeats) if repeats else None
    return OrtCheck(err, ok, exactness, latency)


def _output_quanta(mod: ir.IRModule) -> list[float | None]:
    """Per output of main, its quantum: 1 for an integer output, the constant scalar scale
    of the dequantize that makes a float output, else None."""
    body = mod["main"].body
    outputs = list(body.fields) if isinstance(body, ir.Tuple) else [body]
    quanta: list[float | None] = []
    for out in outputs:
        t = out.checked_type
        if isinstance(t, ir.TensorType) and t.dtype in ("uint8", "int8", "int32"):
            quanta.append(1.0)
            continue
        scale = out.args[1] if isinstance(out, ir.Call) and out.op.name == "dequantize" else None  # type: ignore[union-attr]
        quanta.append(
            float(scale.data) if isinstance(scale, ir.Constant) and scale.data.size == 1 else None
        )
    return quanta


def _exactness(ours: list[Any], expected: list[Any], quanta: list[float | None]) -> str:
    """ "bit for bit" when every output is identical; "within one quantum" when every
    output of a quantised model is at most one quantum off; else "tolerance" (the float
    comparison decides)."""
    pairs = list(zip(ours, expected, strict=False))
    if all(np.array_equal(np.asarray(a), np.asarray(e), equal_nan=True) for a, e in pairs):
        return "bit for bit"
    known = [q for q in quanta if q is not None]
    if len(known) != len(pairs):
        return "tolerance"
    for (a, e), q in zip(pairs, known, strict=True):
        a, e = np.asarray(a, np.float64), np.asarray(e, np.float64)
        if a.shape != e.shape or float(np.max(np.abs(a - e), initial=0.0)) > q * (1 + 1e-6):
            return "tolerance"
    return "within one quantum"


def render_text(report: CompileReport, time_passes: bool = False) -> str:
    """The report for a terminal."""
    b, a = report.before, report.after
    lines = [f"model: {report.model} ({report.kind}), opt level {report.opt_level}"]
    lines += [f"  input %{k}: {t}" for k, t in report.inputs.items()]
    if report.sizes:
        at = ", ".join(f"{k}={v}" for k, v in report.sizes.items())
        lines.append(
            f"  symbolic: one executable for every shape; compiled, checked and measured at "
            f"{at} (--dim); each new set of sizes compiles on its first run"
        )
    for label, s in (("before:", b), ("after: ", a)):
        ops = ", ".join(f"{k} x{v}" for k, v in s.ops.items())
        lines.append(f"  {label} {s.op_calls} op calls, {_si(s.flops)}FLOP; {ops}")
    stages = ", ".join(f"{k} {v:.0f} ms" for k, v in report.compile_stages_ms.items())
    lines.append(
        f"time: import {report.import_ms:.1f} ms, compile {report.compile_ms:.0f} ms ({stages})"
    )
    if time_passes:
        lines.append("passes:")
        lines += ["  " + line for line in _timing_lines(report.passes.timing)]
    for e in report.passes.eqsat:
        lines.append(
            f"  {e.pass_name}: {e.rules_applied} rewrites, {e.enodes} e-nodes, "
            f"stopped: {e.stop}, extracted by {e.extractor}, cost "
            f"{e.cost_before:.4g} -> {e.cost_after:.4g}"
        )
        for rule, matched, applied, share in (
            e.rules if any(r[3] is not None for r in e.rules) else ()
        ):
            part = f"{100 * share:.0f}% of the cost change" if share is not None else "-"
            lines.append(f"    {rule}: {matched} matches, {applied} applied, {part}")
    for name, summaries in report.passes.statistics.items():
        lines.append(f"  {name}: " + " | ".join(summaries))
    kernels = ", ".join(f"{k} x{v}" for k, v in report.kernels.items())
    lines.append(
        f"kernels: {kernels} (loops: JIT nests; gemm: JIT product on packed weights; "
        "blas: BLAS GEMM + JIT epilogue; conv: JIT convolution (or GEMM); host: numpy; "
        "external: a region run by another target)"
    )
    for r in report.regions:
        lines.append(
            f"  region {r['name']} on {r['target']}: {len(r['ops'])} ops, "
            f"{len(r['inputs'])} inputs, {len(r['outputs'])} outputs"
        )
    m = report.memory
    over = m.arena_bytes / m.lower_bound - 1 if m.lower_bound else 0.0
    lines.append(
        f"memory: {m.method} {m.arena_bytes / 2**20:.2f} MiB, lower bound "
        f"{m.lower_bound / 2**20:.2f} MiB (+{over:.1%}), one buffer each "
        f"{m.naive_bytes / 2**20:.2f} MiB"
    )
    if report.cache == "hit":
        lines.append("cache: the compile above was reused (egc compile --no-cache compiles)")
    lines += _run_lines(report)
    lines.append("result: " + ("ok" if report.ok else "FAILED"))
    return "\n".join(lines)


def _agreement(exactness: str) -> str:
    return f" (agrees{'' if exactness == 'tolerance' else ', ' + exactness})"


def _run_lines(report: CompileReport) -> list[str]:
    """The timing and check lines (only what the options asked for)."""
    lines = []
    if report.latency_ms is not None:
        lines.append(f"run: {report.backend}: {report.latency_ms:.3f} ms (median)")
    if (c := report.check_original) is not None:
        lines.append(
            f"check: max |compiled - reference interpreter| {c.max_abs_error:.2e}"
            + (_agreement(c.exactness) if c.within_tolerance else "  MISMATCH")
        )
    if (o := report.onnxruntime) is not None:
        line = f"check: max |compiled - onnxruntime| {o.max_abs_error:.2e}"
        line += _agreement(o.exactness) if o.agrees else "  MISMATCH"
        if o.latency_ms is not None and report.latency_ms is not None:
            ratio = report.latency_ms / o.latency_ms if o.latency_ms else float("nan")
            line += f"; onnxruntime {o.latency_ms:.3f} ms (median), ours/ORT {ratio:.2f}x"
        lines.append(line)
    return lines


def _timing_lines(node: dict[str, Any], depth: int = 0) -> list[str]:
    """The timing tree as indented lines (the tree is as deep as the pipeline nesting)."""
    out = []
    stack = [(node, depth)]
    while stack:
        cur, d = stack.pop()
        if "name" in cur:
            out.append("  " * d + f"{cur['name']}: {1e3 * cur.get('seconds', 0.0):.2f} ms")
        stack.extend((c, d + 1) for c in reversed(cur.get("children", [])))
    return out


def _si(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} "
