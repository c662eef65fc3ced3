"""egc: the command line.

    egc demo                          the main job on a built-in model
    egc compile MODEL [-o OUT.egc]    import, optimise, compile, run, check, report (and save)
    egc run OUT.egc --input x=x.npy   run a saved executable (no compile step)
    egc opt FILE --passes PIPELINE    IR text through a pass pipeline
    egc rules check FILE_OR_SET...    property-test rule files
    egc tune MODEL                    measure kernel choices on this CPU for later compiles
    egc list passes|rules|ops|targets|configs

Exit status: 0 success, 1 a check failed (wrong result, unsound rule), 2 bad input (missing,
unreadable or malformed file, unknown name, unsupported op) with a one-line message, never a
traceback. Tables use `rich` (colour) on a terminal and plain aligned text otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

import egraph_ir as ir
import passmgr as pm
from codegen.artifact_check import read_private_key, write_key_pair
from codegen.artifact_write import project_version
from codegen.external import list_externals
from egraph_ir import models
from egraph_ir.dot import module_to_dot
from egraph_ir.egraph import egraph_to_dot, optimize
from egraph_ir.errors import CompilerError, did_you_mean
from egraph_ir.support import supported_ops
from passmgr.names import check_pass_names
from passmgr.registry import pass_factory

from .cli_run import (
    add_run_parser,
    add_tune_parser,
    print_profile,
    run_saved,
    tune_model,
    write_trace,
)
from .cli_values import (
    config_value,
    count,
    print_report,
    print_table,
    read_text,
    rule_source,
    shape_value,
    write_text,
)
from .job import JobOptions, Progress, load_model, random_inputs, render_text, run_job


def demo(model: str, show_ir: int) -> int:
    """The main job on a built-in model, with the optimised IR's first lines."""
    report, exe = run_job(model, JobOptions(repeats=3), Progress())
    print_report(render_text(report, time_passes=True))
    if show_ir and exe.optimized_module is not None:
        lines = exe.optimized_module.astext(show_meta=False).splitlines()
        print(f"\noptimised IR ({len(lines)} lines, first {min(show_ir, len(lines))}):")
        print("\n".join(lines[:show_ir]))
    return 0 if report["ok"] else 1


def writable(path: str | None) -> None:
    """A file we will write later can be written: its folder exists and takes files."""
    if not path:
        return
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise CompilerError(f"{path}: cannot write (no folder {folder})")
    if Path(path).is_dir():
        raise CompilerError(f"{path}: cannot write (a folder)")
    if not os.access(folder, os.W_OK):
        raise CompilerError(f"{path}: cannot write (folder {folder} is not writable)")


def compile_model(args: argparse.Namespace) -> int:
    opts = JobOptions(
        opt_level=args.opt_level,
        rules=[rule_source(r) for r in args.rules],
        disabled=args.disable,
        print_ir_after=args.print_ir_after,
        check=args.check,
        repeats=args.repeats,
        config=dict(args.config),
        shapes=dict(args.shape),
        targets=targets_value(args.targets),
        place=args.place,
    )
    check_pass_names("--disable", opts.disabled)
    check_pass_names("--print-ir-after", opts.print_ir_after)
    for path in (args.output, args.dot, args.egraph_dot, args.emit_onnx, args.trace):
        writable(path)  # before the compile, not after it
    key = read_private_key(args.sign_key) if args.sign_key else None
    report, exe = run_job(args.model, opts, Progress(enabled=not args.json))
    if args.output:
        exe.save(args.output, key=key)
        report["saved"] = args.output
    if args.dot and exe.optimized_module is not None:
        write_text(args.dot, module_to_dot(exe.optimized_module))
        report["dot"] = args.dot
    if args.egraph_dot:
        write_text(args.egraph_dot, _egraph_dot(args.model, opts.rules, opts.shapes))
        report["egraph_dot"] = args.egraph_dot
    if args.emit_onnx:
        from egraph_ir.frontend import to_onnx

        assert exe.optimized_module is not None
        try:
            Path(args.emit_onnx).write_bytes(to_onnx(exe.optimized_module).SerializeToString())
        except OSError as exc:
            raise CompilerError(f"{args.emit_onnx}: cannot write ({exc.strerror})") from None
        report["onnx"] = args.emit_onnx
    profile = None
    if args.profile or args.trace:
        inputs = _job_inputs(args.model, exe, opts.seed)
        profile = exe.profile(inputs, repeats=args.repeats)
        report["profile"] = [vars(k) for k in profile]
        write_trace(profile, args.trace)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0 if report["ok"] else 1
    print_report(render_text(report, time_passes=args.time_passes))
    for key in ("saved", "onnx"):
        if key in report:
            print(f"wrote {report[key]}")
    if profile is not None and args.profile:
        print_profile(profile, args.top)
    return 0 if report["ok"] else 1


def _job_inputs(model: str, exe: Any, seed: int) -> dict[str, np.ndarray]:
    if model in models.NAMES and not Path(model).exists():
        return models.example_inputs(model)
    assert exe.module is not None
    return random_inputs(exe.module, seed)


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


def rules_check(sources: list[str], max_examples: int, seed: int) -> int:
    """Property-test rule files (or built-in set names): 0 when all are sound, 1 if not."""
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
    return status


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
    elif what == "targets":
        rows = [[t, "native code (LLVM JIT) for this CPU"] for t in TARGETS]
        print_table("targets (codegen.build target=)", ("target", "what"), rows)
        rows = [[t, f"{len(supported_ops(t))} ops supported"] for t in list_externals()]
        print_table("external targets (egc compile --targets)", ("target", "what"), rows)
    else:
        rows = [[k, o.type.__name__, repr(o.default), o.doc] for k, o in pm.list_configs().items()]
        print_table("config keys (--config KEY=VALUE)", ("key", "type", "default", "what"), rows)
    return 0


def targets_value(text: str | None) -> list[str]:
    """--targets a,b: external targets with a code generator, in priority order."""
    if not text:
        return []
    names = [t.strip() for t in text.split(",") if t.strip()]
    known = list_externals()
    for t in names:
        if t not in known:
            raise CompilerError(
                f"--targets: unknown external target '{t}'{did_you_mean(t, known)}; "
                f"known: {', '.join(known)}"
            )
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egc", description="e-graph tensor compiler")
    parser.add_argument("--version", action="version", version=f"egc {project_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p_demo = sub.add_parser("demo", help="the main job on a built-in model")
    p_demo.add_argument("--model", default="transformer", choices=models.NAMES)
    p_demo.add_argument("--show-ir", type=count(0), default=30, metavar="N", help="IR lines")

    p = sub.add_parser("compile", help="import, optimise, compile, run and check a model")
    p.add_argument("model", help="an .onnx file or a built-in model name")
    p.add_argument("-o", "--output", metavar="OUT.egc", help="save the executable to a file")
    p.add_argument("--opt-level", type=int, choices=range(5), default=3, help="0-4 (default 3)")
    p.add_argument(
        "--rules", action="extend", nargs="+", default=[], metavar="FILE_OR_SET",
        help="extra rule files or built-in sets, run by EqSat after the standard pipeline",
    )  # fmt: skip
    p.add_argument("--disable", action="append", default=[], metavar="PASS", help="skip a pass")
    p.add_argument(
        "--print-ir-after", action="append", default=[], metavar="PASS", help="print IR after"
    )
    p.add_argument(
        "--config", action="append", type=config_value, default=[], metavar="KEY=VALUE",
        help="a PassContext config key (egc list configs), e.g. eqsat.node_limit=20000",
    )  # fmt: skip
    p.add_argument(
        "--shape", action="append", type=shape_value, default=[], metavar="NAME=D1,D2,..",
        help="fix an ONNX input's symbolic dimensions",
    )  # fmt: skip
    p.add_argument(
        "--targets", metavar="T1,T2", help="offload to external targets (e.g. onnxruntime,blas)"
    )
    p.add_argument(
        "--place", nargs="?", const="measured", choices=("measured", "model"), default=None,
        help="with --targets: place at least cost instead of first fit; 'measured' (the "
        "default) times ops and candidate builds on this machine (with the compile's opt level "
        "and threads) and keeps the fastest, 'model' uses the nominal cost model",
    )  # fmt: skip
    p.add_argument("--time-passes", action="store_true", help="show the time of every pass")
    p.add_argument("--dot", metavar="OUT.dot", help="write the optimised IR as DOT")
    p.add_argument("--egraph-dot", metavar="OUT.dot", help="write main's saturated e-graph")
    p.add_argument("--emit-onnx", metavar="OUT.onnx", help="export the optimised IR to ONNX")
    p.add_argument("--check", action="store_true", help="fail unless ONNX Runtime agrees")
    p.add_argument("--profile", action="store_true", help="per-kernel times as a table")
    p.add_argument("--top", type=count(1), metavar="N", help="--profile: the N slowest")
    p.add_argument("--trace", metavar="OUT.json", help="a Chrome trace of a profiled run")
    p.add_argument("--json", action="store_true", help="a machine-readable report")
    p.add_argument("--repeats", type=count(1), default=10, help="timed runs (median)")
    p.add_argument("--sign-key", metavar="FILE.key", help="sign the -o file (egc keygen)")

    add_run_parser(sub)
    add_tune_parser(sub)
    p_key = sub.add_parser("keygen", help="a key pair to sign saved executables with")
    p_key.add_argument("name", help="writes NAME.key (private) and NAME.pub (public)")

    p_opt = sub.add_parser("opt", help="run a pass pipeline on IR text")
    p_opt.add_argument("input", help="IR text file, or - for stdin")
    p_opt.add_argument("--passes", required=True, help="e.g. 'InferType,AlgebraicSimplify'")
    p_opt.add_argument("-o", "--output", metavar="OUT.ir", help="write here, not to stdout")
    p_opt.add_argument("--opt-level", type=int, choices=range(5), default=3, help="0-4")

    p_rules = sub.add_parser("rules", help="work with rule files")
    rules_sub = p_rules.add_subparsers(dest="rules_command", required=True)
    p_check = rules_sub.add_parser(
        "check", help="property-test rules: exit 0 when sound, 1 with the counterexamples"
    )
    p_check.add_argument("files", nargs="+", metavar="FILE", help="a .rules file or built-in set")
    p_check.add_argument("--max-examples", type=count(1), default=100, metavar="N")
    p_check.add_argument("--seed", type=count(0), default=0, help="hypothesis seed")

    p_list = sub.add_parser("list", help="list passes, rule sets, ops, targets or config keys")
    p_list.add_argument("what", choices=("passes", "rules", "ops", "targets", "configs"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            return demo(args.model, args.show_ir)
        if args.command == "compile":
            return compile_model(args)
        if args.command == "run":
            return run_saved(args)
        if args.command == "opt":
            return opt(args)
        if args.command == "keygen":
            private, public = write_key_pair(args.name)
            print(f"wrote {private} (keep it private: it signs) and {public} (hand it out)")
            return 0
        if args.command == "list":
            return list_things(args.what)
        if args.command == "tune":
            return tune_model(args)
        if args.command == "rules" and args.rules_command == "check":
            return rules_check(args.files, args.max_examples, args.seed)
    except CompilerError as exc:
        print(f"egc: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("egc: error: out of memory (a shape too large for this machine?)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
