"""egc: the command line. `egc demo`, `egc compile MODEL`, `egc opt`, `egc rules check`.

Exit status: 0 success, 1 a check failed (wrong result, unsound rule), 2 bad input (missing
or malformed file, unknown pass, unsupported op) with a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import egraph_ir as ir
import passmgr as pm
from egraph_ir import models
from egraph_ir.dot import module_to_dot
from egraph_ir.egraph import egraph_to_dot, optimize
from egraph_ir.errors import CompilerError

from .job import JobOptions, Progress, load_model, render_text, run_job


def demo(model: str, show_ir: int) -> int:
    """The main job on a built-in model, with the optimised IR's first lines."""
    report, exe = run_job(model, JobOptions(repeats=3), Progress())
    print(render_text(report, time_passes=True))
    if show_ir and exe.optimized_module is not None:
        lines = exe.optimized_module.astext(show_meta=False).splitlines()
        print(f"\noptimised IR ({len(lines)} lines, first {min(show_ir, len(lines))}):")
        print("\n".join(lines[:show_ir]))
    return 0 if report["ok"] else 1


def compile_model(args: argparse.Namespace) -> int:
    opts = JobOptions(
        opt_level=args.opt_level,
        rules=args.rules,
        disabled=args.disable,
        print_ir_after=args.print_ir_after,
        check=args.check,
        repeats=args.repeats,
    )
    for path in args.rules:
        if not Path(path).is_file():
            raise CompilerError(f"{path}: no such rule file")
    report, exe = run_job(args.model, opts, Progress(enabled=not args.json))
    if args.dot and exe.optimized_module is not None:
        Path(args.dot).write_text(module_to_dot(exe.optimized_module))
        report["dot"] = args.dot
    if args.egraph_dot:
        Path(args.egraph_dot).write_text(_egraph_dot(args.model, args.rules))
        report["egraph_dot"] = args.egraph_dot
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render_text(report, time_passes=args.time_passes))
    return 0 if report["ok"] else 1


def _egraph_dot(model: str, rule_files: list[str]) -> str:
    """The main function's e-graph saturated with the algebraic and layout rules (and the
    user's), as DOT; refused above 2,000 e-nodes."""
    import rules

    mod, _, _ = load_model(model)
    rule_set = rules.builtin("algebraic") + rules.builtin("layout")
    for path in rule_files:
        rule_set = rule_set + rules.load(path)
    result = optimize(mod["main"], rule_set.enabled(fast_math=False).rewrites())
    assert result.snapshot is not None
    return egraph_to_dot(result.snapshot, root=result.root_class)


def opt(args: argparse.Namespace) -> int:
    """The text format in and out through a pipeline."""
    try:
        text = Path(args.input).read_text() if args.input != "-" else sys.stdin.read()
    except OSError as exc:
        raise CompilerError(f"{args.input}: cannot read ({exc.strerror})") from None
    mod = ir.parse(text)
    pipeline = pm.parse_pipeline(args.passes)
    with pm.PassContext(opt_level=args.opt_level):
        out = pipeline(mod)
    result = out.astext(show_meta=True)
    if args.output:
        Path(args.output).write_text(result + "\n")
    else:
        print(result)
    return 0


def rules_check(sources: list[str], max_examples: int, seed: int) -> int:
    """Property-test rule files (or built-in set names): 0 when all are sound, 1 if not."""
    import rules

    status = 0
    for source in sources:
        is_builtin = source in rules.builtin_names() and not Path(source).exists()
        rule_set = rules.builtin(source) if is_builtin else rules.load(source)
        report = rules.check_soundness(rule_set, max_examples=max_examples, seed=seed)
        print(f"{source}: {report}")
        if not report.ok:
            status = 1
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egc", description="e-graph tensor compiler")
    sub = parser.add_subparsers(dest="command", required=True)

    p_demo = sub.add_parser("demo", help="the main job on a built-in model")
    p_demo.add_argument("--model", default="transformer", choices=models.NAMES)
    p_demo.add_argument("--show-ir", type=int, default=30, metavar="N", help="IR lines to show")

    p_compile = sub.add_parser("compile", help="import, optimise, run and report on a model")
    p_compile.add_argument("model", help="an .onnx file or a built-in model name")
    p_compile.add_argument("--opt-level", type=int, default=3)
    p_compile.add_argument("--rules", action="append", default=[], metavar="FILE")
    p_compile.add_argument("--disable", action="append", default=[], metavar="PASS")
    p_compile.add_argument("--print-ir-after", action="append", default=[], metavar="PASS")
    p_compile.add_argument("--time-passes", action="store_true")
    p_compile.add_argument("--dot", metavar="OUT.dot", help="write the optimised IR as DOT")
    p_compile.add_argument(
        "--egraph-dot", metavar="OUT.dot", help="write the saturated e-graph of main as DOT"
    )
    p_compile.add_argument("--check", action="store_true", help="fail unless ORT agrees")
    p_compile.add_argument("--json", action="store_true", help="a machine-readable report")
    p_compile.add_argument("--repeats", type=int, default=10, help="timed runs (median)")

    p_opt = sub.add_parser("opt", help="run a pass pipeline on IR text")
    p_opt.add_argument("input", help="IR text file, or - for stdin")
    p_opt.add_argument("--passes", required=True, help="e.g. 'InferType,AlgebraicSimplify'")
    p_opt.add_argument("-o", "--output", metavar="OUT.ir")
    p_opt.add_argument("--opt-level", type=int, default=3)

    p_rules = sub.add_parser("rules", help="work with rule files")
    rules_sub = p_rules.add_subparsers(dest="rules_command", required=True)
    p_check = rules_sub.add_parser(
        "check", help="property-test rules: exit 0 when sound, 1 with the counterexamples"
    )
    p_check.add_argument("files", nargs="+", metavar="FILE", help="a .rules file or built-in set")
    p_check.add_argument("--max-examples", type=int, default=100, metavar="N")
    p_check.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            return demo(args.model, args.show_ir)
        if args.command == "compile":
            return compile_model(args)
        if args.command == "opt":
            return opt(args)
        if args.command == "rules" and args.rules_command == "check":
            return rules_check(args.files, args.max_examples, args.seed)
    except CompilerError as exc:
        print(f"egc: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
