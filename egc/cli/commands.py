"""The commands behind `egc` (compile, demo, opt, rules check, list); egc/cli/main.py parses the
command line and calls them, egc/cli/run.py holds run and tune."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import egraph_ir as ir
import passmgr as pm
from codegen.artifact.check import read_private_key, write_key_pair
from codegen.artifact.load import load
from codegen.external import list_externals
from codegen.runtime.executable import Executable
from codegen.symbolic import SymbolicExecutable
from egraph_ir.dot import module_to_dot
from egraph_ir.egraph import egraph_to_dot, optimize
from egraph_ir.errors import CompilerError, did_you_mean
from egraph_ir.support import supported_ops
from passmgr.names import check_pass_names
from passmgr.registry import pass_factory

from .. import compile_cache
from ..job import (
    JobOptions,
    Progress,
    load_model,
    random_inputs,
    render_text,
    run_checks,
    run_job,
)
from ..options import unwritable
from ..report import CompileReport
from .args import compile_request
from .run import choice_summary, print_choices, print_profile, write_trace
from .values import print_report, print_table, read_text, rule_source, write_text


def demo(model: str, show_ir: int) -> int:
    """The main job on a built-in model, with the optimised IR's first lines."""
    options = JobOptions(opt_level=3, check=True, repeats=3)  # every pass, checked and timed
    report, exe = run_job(model, options, Progress())
    print_report(render_text(report, time_passes=True))
    if show_ir and exe.optimized_module is not None:
        lines = exe.optimized_module.astext(show_meta=False).splitlines()
        print(f"\noptimised IR ({len(lines)} lines, first {min(show_ir, len(lines))}):")
        print("\n".join(lines[:show_ir]))
    return 0 if report.ok else 1


def compile_model(args: argparse.Namespace) -> int:
    """`egc compile`: compile (or take from the cache), then what the options ask."""
    request = compile_request(args)
    opts = request.options
    opts.rules = [rule_source(r) for r in opts.rules]
    check_targets(opts.targets)
    check_pass_names("--disable", opts.disabled)
    check_pass_names("--print-ir-after", opts.print_ir_after)
    for path in (args.output, args.dot, args.egraph_dot, args.emit_onnx, args.trace):
        if problem := unwritable(path):  # before the compile, not after it
            raise CompilerError(problem)
    key = read_private_key(args.sign_key) if args.sign_key else None
    progress = Progress(enabled=not args.json)
    cache_key = compile_cache.key_for(request)
    cached = compile_cache.lookup(cache_key) if cache_key and not request.needs_ir else None
    if cached is not None:
        report, exe = _from_cache(args.model, cached, opts, progress)
    else:
        report, exe = run_job(args.model, opts, progress)
    if args.output:
        exe.save(args.output, key=key)
        report = report.with_(saved=args.output)
    if cache_key and cached is None:
        _store(cache_key, exe, report, args.output if args.output and not key else None)
    report = _write_ir_files(args, exe, opts, report)
    profile = None
    if args.profile or args.trace or args.report:
        inputs = _job_inputs(args.model, opts)
        profile = exe.profile(inputs, repeats=args.repeats or 10)
        choices = choice_summary(profile) if args.report else None
        report = report.with_(profile=[vars(k) for k in profile], choices=choices)
        write_trace(profile, args.trace)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
        return 0 if report.ok else 1
    print_report(render_text(report, time_passes=args.time_passes))
    for written in (report.saved, report.onnx):
        if written:
            print(f"wrote {written}")
    if profile is not None and args.profile:
        print_profile(profile, args.top)
    if profile is not None and args.report:
        print_choices(profile)
    return 0 if report.ok else 1


def _from_cache(
    model: str, cached: tuple[Path, dict[str, Any]], opts: JobOptions, progress: Progress
) -> tuple[CompileReport, Executable | SymbolicExecutable]:
    """A cache hit that runs (--check, --repeats, a profile, a signed -o): the stored
    report, the cached executable loaded, the runs done on it."""
    artifact, stored = cached
    exe = load(str(artifact))
    report = CompileReport.from_json(stored["report"]).with_(cache="hit", ok=True)
    report = run_checks(report, exe, load_model(model, opts.shapes), opts, progress)
    return report, exe


def _store(
    key: str, exe: Executable | SymbolicExecutable, report: CompileReport, saved: str | None
) -> None:
    """The compile into the cache: its executable (the unsigned -o file when there is one)
    and its report without what one run measured."""
    kept = report.without_run()
    text = render_text(kept)
    if saved:
        compile_cache.store(key, Path(saved), kept.to_json(), text)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.egc"
        exe.save(str(path))
        compile_cache.store(key, path, kept.to_json(), text)


def _write_ir_files(
    args: argparse.Namespace,
    exe: Executable | SymbolicExecutable,
    opts: JobOptions,
    report: CompileReport,
) -> CompileReport:
    """--dot, --egraph-dot, --emit-onnx: the optimised IR and main's e-graph as files."""
    if args.dot and exe.optimized_module is not None:
        write_text(args.dot, module_to_dot(exe.optimized_module))
        report = report.with_(dot=args.dot)
    if args.egraph_dot:
        write_text(args.egraph_dot, _egraph_dot(args.model, opts.rules, opts.shapes))
        report = report.with_(egraph_dot=args.egraph_dot)
    if args.emit_onnx:
        from egraph_ir.frontend import to_onnx

        assert exe.optimized_module is not None
        try:
            Path(args.emit_onnx).write_bytes(to_onnx(exe.optimized_module).SerializeToString())
        except OSError as exc:
            raise CompilerError(f"{args.emit_onnx}: cannot write ({exc.strerror})") from None
        report = report.with_(onnx=args.emit_onnx)
    return report


def _job_inputs(model: str, opts: JobOptions) -> dict[str, np.ndarray]:
    mod, _, inputs = load_model(model, opts.shapes)
    return inputs if inputs is not None else random_inputs(mod, opts.seed)


def _egraph_dot(model: str, rule_sources: list[str], shapes: dict[str, tuple[int, ...]]) -> str:
    """The main function's e-graph saturated with the algebraic and layout rules (and the
    user's), as DOT; refused above 2,000 e-nodes."""
    import rules

    mod, _, _ = load_model(model, shapes)
    rule_set = rules.builtin("algebraic") + rules.builtin("layout")
    for source in rule_sources:
        is_file = Path(source).is_file()
        rule_set = rule_set + (rules.load(source) if is_file else rules.builtin(source))
    result = optimize(mod["main"], rule_set.enabled(fast_math=False).rewrites())
    assert result.snapshot is not None
    return egraph_to_dot(result.snapshot, root=result.root_class)


def opt(args: argparse.Namespace) -> int:
    """The text format in and out through a pipeline."""
    mod = ir.parse(read_text(args.input), source=args.input)
    pipeline = pm.parse_pipeline(args.passes)
    with pm.PassContext(opt_level=args.opt_level):
        out = pipeline(mod)
    result = out.astext(show_meta=True)
    if args.output:
        write_text(args.output, result + "\n")
    else:
        print(result)
    return 0


def rules_check(
    sources: list[str], max_examples: int, seed: int, prove_timeout: float | None = None
) -> int:
    """Property-test rule files (or built-in set names), and with `prove_timeout` prove
    them too: 0 when all are sound and none is refuted, 1 if not."""
    import rules

    status = 0
    for source in sources:
        rule_source(source)
        is_builtin = source in rules.builtin_names() and not Path(source).exists()
        rule_set = rules.builtin(source) if is_builtin else rules.load(source)
        report = rules.check_soundness(rule_set, max_examples=max_examples, seed=seed)
        print(f"{source}: {report}")
        if not report.ok:
            status = 1
        if prove_timeout is not None:
            proofs = rules.prove(rule_set, timeout=prove_timeout)
            print(f"{source}: {proofs}")
            if proofs.with_status("refuted"):
                status = 1
    return status


def rules_list(sources: list[str], check: bool, timeout: float, max_examples: int) -> int:
    """`egc rules list [FILE_OR_SET...] [--prove]`: a line per rule with its verdict
    (proven, tested, refuted; kept between runs, egc/rule_verdicts.py)."""
    import rules

    from ..rule_verdicts import verdicts

    rows, refuted = [], 0
    for source in sources or rules.builtin_names():
        rule_source(source)
        is_builtin = source in rules.builtin_names() and not Path(source).exists()
        rule_set = rules.builtin(source) if is_builtin else rules.load(source)
        for v in verdicts(rule_set, check, timeout=timeout, max_examples=max_examples):
            reason = v.reason if len(v.reason) <= 90 else v.reason[:87] + "..."
            rows.append([source, v.rule, ", ".join(v.tags), v.verdict, reason])
            refuted += v.verdict == "refuted"
    print_table("rules", ("set", "rule", "tags", "verdict", "why"), rows)
    counts = {k: sum(r[3] == k for r in rows) for k in ("proven", "tested", "refuted")}
    unchecked = sum(r[3] == "not checked" for r in rows)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    print(summary + (f", {unchecked} not checked (--prove checks them)" if unchecked else ""))
    return 1 if refuted else 0


def rules_explain(args: argparse.Namespace) -> int:
    """`egc rules explain FILE RULE MODEL`: the model imported and typed, then why the rule
    fires or not there (rules.explain, with the rest of its set alongside)."""
    import rules

    rule_source(args.file)
    is_builtin = args.file in rules.builtin_names() and not Path(args.file).exists()
    rule_set = rules.builtin(args.file) if is_builtin else rules.load(args.file)
    try:
        rule = rule_set[args.rule]
    except KeyError:
        raise CompilerError(
            f"{args.file} has no rule '{args.rule}'; its rules: {', '.join(rule_set.names)}"
        ) from None
    mod, _, _ = load_model(args.model, dict(args.shape))
    print(rules.explain(rule, mod, fast_math=args.fast_math, along=rule_set))
    return 0


def list_things(what: str) -> int:
    """`egc list passes|rules|ops|targets|configs` as a table."""
    import rules
    from codegen.build import TARGETS

    if what == "passes":
        rows = []
        for name in pm.list_passes():
            info = pm.get_pass(name).info
            doc = (pass_factory(name).__doc__ or "").strip().split("\n")[0]
            rows.append([name, str(info.opt_level), doc])
        print_table("passes (pipeline text: egc opt --passes)", ("pass", "opt level", "what"), rows)
    elif what == "rules":
        rows = []
        for name in rules.builtin_names():
            rs = rules.builtin(name)
            tags = sorted({t for r in rs for t in r.tags})
            rows.append([name, str(len(list(rs))), ", ".join(tags)])
        print_table("built-in rule sets (--rules NAME)", ("set", "rules", "tags"), rows)
    elif what == "ops":
        rows = []
        for name in ir.op.list_ops():
            o = ir.op.get(name)
            attrs = ", ".join(a.name for a in o.attrs)
            rows.append([name, o.pattern.name, attrs])
        print_table("ops", ("op", "fusion pattern", "attributes"), rows)
    elif what == "onnx-ops":
        from egraph_ir.frontend.onnx import CONVERTERS

        rows = [
            [name.rpartition(".")[2], name.rpartition(".")[0] or "ai.onnx"]
            for name in sorted(CONVERTERS)
        ]
        title = f"ONNX operators the importer reads ({len(rows)})"
        print_table(title, ("op type", "domain"), rows)
    elif what == "targets":
        rows = [[t, "native code (LLVM JIT) for this CPU"] for t in TARGETS]
        print_table("targets (codegen.build target=)", ("target", "what"), rows)
        rows = [[t, f"{len(supported_ops(t))} ops supported"] for t in list_externals()]
        print_table("external targets (egc compile --targets)", ("target", "what"), rows)
    else:
        rows = [[k, o.type.__name__, repr(o.default), o.doc] for k, o in pm.list_configs().items()]
        print_table("config keys (--config KEY=VALUE)", ("key", "type", "default", "what"), rows)
    return 0


def check_targets(names: list[str]) -> None:
    """--targets a,b: external targets with a code generator, in priority order."""
    known = list_externals()
    for t in names:
        if t not in known:
            raise CompilerError(
                f"--targets: unknown external target '{t}'{did_you_mean(t, known)}; "
                f"known: {', '.join(known)}"
            )


def keygen(name: str) -> int:
    private, public = write_key_pair(name)
    print(f"wrote {private} (keep it private: it signs) and {public} (hand it out)")
    return 0
