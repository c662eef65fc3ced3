"""egc: the command line.

    egc demo                          the main job on a built-in model
    egc compile MODEL [-o OUT.egc]    import, optimise, compile, run, check, report (and save)
    egc run OUT.egc --input x=x.npy   run a saved executable (no compile step)
    egc opt FILE --passes PIPELINE    IR text through a pass pipeline
    egc rules check FILE_OR_SET...    property-test rule files
    egc list passes|rules|ops|targets|configs

Exit status: 0 success, 1 a check failed (wrong result, unsound rule), 2 bad input (missing,
unreadable or malformed file, unknown name, unsupported op) with a one-line message, never a
traceback. Tables use `rich` (colour) on a terminal and plain aligned text otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import egraph_ir as ir
import passmgr as pm
from codegen.artifact import load
from codegen.artifact_check import read_private_key, read_public_key, write_key_pair
from codegen.artifact_write import project_version
from codegen.executable import aligned
from codegen.external import list_externals
from egraph_ir import models
from egraph_ir.compare import leaves
from egraph_ir.dot import module_to_dot
from egraph_ir.egraph import egraph_to_dot, optimize
from egraph_ir.errors import CompilerError, did_you_mean
from egraph_ir.support import supported_ops
from passmgr.config import config_option
from passmgr.names import check_pass_names
from passmgr.registry import pass_factory

from .job import JobOptions, Progress, load_model, random_inputs, render_text, run_job


# ---------------------------------------------------------------- output helpers
def print_table(title: str, header: Sequence[str], rows: list[list[str]]) -> None:
    """A table: rich (with colour) on a terminal, aligned plain text otherwise."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for h in header:
            table.add_column(h)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    print(title)
    print(aligned(header, rows))


def print_report(text: str) -> None:
    """The job report: highlighted by rich on a terminal (numbers, a green ok or a red
    FAILED/MISMATCH), plain text otherwise."""
    if not sys.stdout.isatty():
        print(text)
        return
    from rich.console import Console
    from rich.text import Text

    styled = Text(text)
    styled.highlight_words(["result: ok", "(agrees)"], "bold green")
    styled.highlight_words(["FAILED", "MISMATCH"], "bold red")
    Console().print(styled, highlight=True)


def write_text(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise CompilerError(f"{path}: cannot write ({exc.strerror or exc})") from None


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8") if path != "-" else sys.stdin.read()
    except OSError as exc:
        raise CompilerError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise CompilerError(f"{path}: not UTF-8 text (byte {exc.start})") from None


# ---------------------------------------------------------------- argument values
def config_value(text: str) -> tuple[str, Any]:
    """KEY=VALUE for a registered config key, VALUE converted to the key's type."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        option = config_option(key.strip())
        return option.key, option.parse(raw)
    except CompilerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def shape_value(text: str) -> tuple[str, tuple[int, ...]]:
    """NAME=D1,D2,... (or NAME=D1xD2): the shape of an input with symbolic dimensions."""
    name, sep, dims = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        if any(d < 0 for d in shape):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected NAME=D1,D2,... with non-negative integers, got {text!r}"
        ) from None
    return name, shape


def input_value(text: str) -> tuple[str, str]:
    """NAME=FILE.npy, or FILE.npz (its arrays by name)."""
    name, sep, path = text.partition("=")
    return (name, path) if sep else ("", text)


def count(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def rule_source(source: str) -> str:
    """A rule file, or the name of a built-in rule set."""
    import rules

    if Path(source).is_file() or source in rules.builtin_names():
        return source
    hint = did_you_mean(source, rules.builtin_names())
    raise CompilerError(
        f"{source}: no such rule file or built-in rule set{hint}; "
        f"built-in: {', '.join(rules.builtin_names())}"
    )


# ---------------------------------------------------------------- commands
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


def print_profile(profile: Any, top: int | None) -> None:
    """The per-kernel table (the `top` slowest), time by kind of work, and the total."""
    rows = profile.rows()
    shown = rows[:top] if top else rows
    title = "per-kernel profile" + (f" (slowest {len(shown)} of {len(rows)})" if top else "")
    print_table(title, profile.HEADER, shown)
    total = profile.total_seconds or 1.0
    by_op = [
        [name, str(n), f"{1e6 * s:.1f}", f"{100 * s / total:.1f}%"]
        for name, n, s in profile.by_op()
    ]
    print_table("time by kind of kernel", ("kind and op", "kernels", "us", "share"), by_op)
    print(f"total {1e6 * profile.total_seconds:.1f} us in {len(rows)} kernels (medians summed)")


def write_trace(profile: Any, path: str | None) -> None:
    """--trace: the profile as a Chrome trace (Perfetto, chrome://tracing)."""
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(profile.trace()))
    except OSError as exc:
        raise CompilerError(f"{path}: cannot write ({exc.strerror})") from None


def run_saved(args: argparse.Namespace) -> int:
    """Load a saved executable and run it on inputs from .npy/.npz files."""
    if args.require_signature and not args.trusted_key:
        raise CompilerError("--require-signature needs at least one --trusted-key FILE.pub")
    trusted = [read_public_key(p) for p in args.trusted_key] if args.trusted_key else None
    exe = load(args.file, trusted_keys=trusted)
    inputs: dict[str, np.ndarray] = {}
    for name, path in args.input:
        try:
            data = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CompilerError(f"{path}: cannot read as .npy/.npz ({exc})") from None
        if isinstance(data, np.lib.npyio.NpzFile):
            inputs.update({k: data[k] for k in data.files})
        elif name:
            inputs[name] = data
        elif len(exe.input_types) == 1:
            inputs[next(iter(exe.input_types))] = data
        else:
            raise CompilerError(f"{path}: say which input it is (NAME={path})")
    if args.random:
        rng = np.random.default_rng(args.seed)
        for name, t in exe.input_types.items():
            inputs.setdefault(name, rng.standard_normal(t.shape).astype(t.dtype))
    named: dict[str, Any] = dict(zip(exe.output_names, leaves(exe.run(**inputs)), strict=True))
    if args.output:
        try:
            np.savez(args.output, **named)
        except OSError as exc:
            raise CompilerError(f"{args.output}: cannot write ({exc.strerror})") from None
    timing = args.repeats is not None or args.duration is not None
    latency = None
    if timing:
        repeats = args.repeats if args.repeats is not None else 1
        latency = exe.benchmark(inputs, repeats, args.warmup, args.duration)
    profile = None
    if args.profile or args.trace:
        profile = exe.profile(inputs, repeats=args.repeats or 10)
        write_trace(profile, args.trace)
    if args.json:
        report: dict[str, Any] = {
            "file": args.file,
            "outputs": {
                n: {"dtype": str(v.dtype), "shape": list(v.shape)} for n, v in named.items()
            },
            "threads": exe.threads,
        }
        if latency is not None:
            report["latency"] = latency.to_json()
        if profile is not None and args.profile:
            report["profile"] = [dataclasses.asdict(k) for k in profile]
        print(json.dumps(report, indent=2))
        return 0
    if args.output:
        print(f"wrote {', '.join(named)} to {args.output}")
    else:
        for name, value in named.items():
            print(f"{name}: {value.dtype}{list(value.shape)}")
            print(np.array2string(value, threshold=20, edgeitems=3))
    if latency is not None:
        print(latency)
    if profile is not None and args.profile:
        print_profile(profile, args.top)
    return 0


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


def tune_model(args: argparse.Namespace) -> int:
    """`egc tune MODEL`: measure the kernel candidates of the model's anchors on this
    machine and record them where later compiles read them."""
    from codegen.tune import TuneReport, tune

    mod, _, _ = load_model(args.model, dict(args.shape))
    config: dict[str, Any] = {"codegen.num_threads": args.threads}
    with pm.PassContext(opt_level=3, config=config):
        report: TuneReport = tune(mod, args.db)
    print_table(f"measured kernels ({args.threads or 'all'} threads)", report.HEADER, report.rows())
    print(f"recorded {len(report.kernels)} anchor shape(s) in {report.path}")
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


# ---------------------------------------------------------------- the parser
def _add_run_parser(sub: Any) -> None:
    """`egc run`: a saved executable on inputs from files."""
    p_run = sub.add_parser("run", help="run a saved executable (egc compile -o)")
    p_run.add_argument("file", help="a file written by egc compile -o / Executable.save")
    p_run.add_argument(
        "--input", action="append", type=input_value, default=[], metavar="NAME=FILE.npy",
        help="an input array (.npy), or FILE.npz holding inputs by name",
    )  # fmt: skip
    p_run.add_argument("--random", action="store_true", help="random values for the rest")
    p_run.add_argument("--seed", type=count(0), default=0, help="for --random")
    p_run.add_argument("--output", metavar="OUT.npz", help="save the outputs by name")
    p_run.add_argument("--profile", action="store_true", help="per-kernel times as a table")
    p_run.add_argument("--top", type=count(1), metavar="N", help="--profile: the N slowest")
    p_run.add_argument("--trace", metavar="OUT.json", help="a Chrome trace of a profiled run")
    p_run.add_argument(
        "--repeats", type=count(1), default=None,
        help="time this many runs: mean, p50/p90/p99, min, max, throughput (--profile: 10)",
    )  # fmt: skip
    p_run.add_argument("--duration", type=seconds, metavar="S", help="time runs for S seconds")
    p_run.add_argument("--warmup", type=count(0), default=5, help="untimed runs first")
    p_run.add_argument("--json", action="store_true", help="outputs and timings as JSON")
    p_run.add_argument(
        "--trusted-key", action="append", default=[], metavar="FILE.pub",
        help="load only a file signed by this key (egc keygen); may repeat",
    )  # fmt: skip
    p_run.add_argument(
        "--require-signature", action="store_true", help="refuse to run without a --trusted-key"
    )


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

    _add_run_parser(sub)
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

    p_tune = sub.add_parser("tune", help="measure kernel choices for a model on this machine")
    p_tune.add_argument("model", help="an .onnx file or a built-in model name")
    p_tune.add_argument("--db", metavar="FILE.json", help="the kernel database (default: per CPU)")
    p_tune.add_argument("--threads", type=count(0), default=0, help="thread budget (0: all)")
    p_tune.add_argument(
        "--shape", action="append", type=shape_value, default=[], metavar="NAME=D1,D2,..",
        help="fix an ONNX input's symbolic dimensions",
    )  # fmt: skip

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
