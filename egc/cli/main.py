"""egc: the command line.

Parsing is light (standard library only) and the compiler is imported when a command needs
it, so `egc compile` answered from the compile cache and `egc --help` start in a blink.
The commands themselves live in egc/cli/commands.py (compile, demo, opt, rules, list) and
egc/cli/run.py (run, tune).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from .args import config_value, count, dim_value, input_value, seconds, shape_value

COMMANDS = """\
commands:
  egc demo                          the main job on a built-in model
  egc compile MODEL [-o OUT.egc]    import, optimise, compile (and save); --check compares
  egc run OUT.egc --random          run a saved executable (no compile step); --repeats times it
  egc opt FILE --passes PIPELINE    IR text through a pass pipeline
  egc rules check FILE_OR_SET...    property-test rule files (--prove: and prove them)
  egc rules explain FILE RULE MODEL why a rule fires or not, place by place
  egc rules list [FILE_OR_SET...]   a verdict per rule: proven, tested, refuted (--prove)
  egc tune MODEL                    measure kernel choices on this CPU for later compiles
  egc cache info|clear              the compile cache
  egc list passes|rules|ops|onnx-ops|targets|configs
"""

EXAMPLES = """\
examples:
  egc compile resnet18.onnx -o resnet18.egc            compile once (cached: again is instant)
  egc compile resnet18.onnx --check                    compare with the interpreter and ORT
  egc compile model.onnx --shape x=1,3,224,224 -o m.egc   fix a symbolic input dimension
  egc run resnet18.egc --random --repeats 100 --json   a latency benchmark
  egc run resnet18.egc --random --profile --top 10 --trace t.json   where the time goes
  egc compile mlp --targets onnxruntime,blas           offload regions to other targets

exit status:
  0  success
  1  a check failed (a wrong result, an unsound rule)
  2  bad input (a missing, unreadable or malformed file, an unknown name, an unsupported op),
     with a one-line message, never a traceback
"""

LOG_LEVELS = ("debug", "info", "warning", "error")


class _Version(argparse.Action):
    """--version, looked up only when asked (importlib.metadata is slow to import)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from importlib import metadata

        try:
            version = metadata.version("egraph-compiler")
        except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
            version = "unknown"
        print(f"egc {version}")
        parser.exit()


REPORT_HELP = (
    "what the extraction chose, kernel by kernel in run order: ops, kernel kind, the layout "
    "each writes, the cost model's predicted beside the measured time (profiles a run)"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="egc",
        description="An e-graph tensor compiler: ONNX models in, native executables out.",
        epilog=COMMANDS + "\n" + EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)"
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="log at this level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_demo = sub.add_parser("demo", help="the main job on a built-in model")
    p_demo.add_argument("--model", default="transformer", help="a built-in model name")
    p_demo.add_argument("--show-ir", type=count(0), default=30, metavar="N", help="IR lines")

    _add_compile_parser(sub)
    _add_run_parser(sub)
    _add_tune_parser(sub)
    p_key = sub.add_parser("keygen", help="a key pair to sign saved executables with")
    p_key.add_argument("name", help="writes NAME.key (private) and NAME.pub (public)")

    p_opt = sub.add_parser("opt", help="run a pass pipeline on IR text")
    p_opt.add_argument("input", help="IR text file, or - for stdin")
    p_opt.add_argument("--passes", required=True, help="e.g. 'InferType,AlgebraicSimplify'")
    p_opt.add_argument("-o", "--output", metavar="OUT.ir", help="write here, not to stdout")
    p_opt.add_argument("--opt-level", type=int, choices=range(5), default=2, help="0-4")

    p_rules = sub.add_parser("rules", help="work with rule files")
    rules_sub = p_rules.add_subparsers(dest="rules_command", required=True)
    p_check = rules_sub.add_parser(
        "check", help="property-test rules: exit 0 when sound, 1 with the counterexamples"
    )
    p_check.add_argument("files", nargs="+", metavar="FILE", help="a .rules file or built-in set")
    p_check.add_argument("--max-examples", type=count(1), default=100, metavar="N")
    p_check.add_argument("--seed", type=count(0), default=0, help="hypothesis seed")
    p_check.add_argument(
        "--prove", action="store_true",
        help="also prove each rule with an SMT solver (z3; pip install egraph-compiler[prove]):"
        " proven, refuted with a counterexample, or unknown with the reason",
    )  # fmt: skip
    p_check.add_argument(
        "--timeout", type=float, default=10.0, metavar="S", help="--prove: seconds per rule"
    )

    p_rlist = rules_sub.add_parser(
        "list", help="a line per rule: proven, tested or refuted (kept between runs)"
    )
    p_rlist.add_argument("files", nargs="*", metavar="FILE", help="rule files or built-in sets")
    p_rlist.add_argument(
        "--prove", action="store_true",
        help="check the rules not checked before: z3, then the property test where z3 cannot say",
    )  # fmt: skip
    p_rlist.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per rule")
    p_rlist.add_argument("--max-examples", type=count(1), default=30, metavar="N")

    p_explain = rules_sub.add_parser(
        "explain", help="why a rule does or does not fire on a model, place by place"
    )
    p_explain.add_argument("file", metavar="FILE", help="a .rules file or built-in set")
    p_explain.add_argument("rule", metavar="RULE", help="the rule's name")
    p_explain.add_argument("model", metavar="MODEL", help="ONNX file, IR text or built-in model")
    p_explain.add_argument("--fast-math", action="store_true", help="as under eqsat.fast_math")
    p_explain.add_argument(
        "--shape", action="append", type=shape_value, default=[], metavar="NAME=D1,D2,..",
        help="fix an ONNX input's symbolic dimensions",
    )  # fmt: skip

    p_cache = sub.add_parser("cache", help="the compile cache: where, how big, clear it")
    p_cache.add_argument("action", choices=("info", "clear"))

    p_list = sub.add_parser("list", help="list passes, rule sets, ops, targets or config keys")
    p_list.add_argument(
        "what", choices=("passes", "rules", "ops", "onnx-ops", "targets", "configs")
    )
    return parser


def _add_compile_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compile",
        help="import, optimise and compile a model (--check: compare it; -o: save it)",
        epilog="Only compiles unless asked: --check runs the compiled model against the "
        "reference interpreter (and ONNX Runtime for an ONNX file) and fails on any "
        "disagreement; --repeats N times N runs. A compile is cached (egc cache info).",
    )
    p.add_argument("model", help="an .onnx file or a built-in model name")
    p.add_argument("-o", "--output", metavar="OUT.egc", help="save the executable to a file")
    p.add_argument(
        "--opt-level", type=int, choices=range(5), default=2,
        help="0-4 (default 2, as PassContext; 3 adds FoldScaleAxis and CombineParallelDense)",
    )  # fmt: skip
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
        "--dim", action="append", type=dim_value, default=[], metavar="NAME=N",
        help="a symbolic program stays symbolic; check, time and report it at this size "
        "(1 where not given); NAME=LOW..HIGH: the sizes it runs at (refused outside), "
        "kernels chosen and the check run at HIGH",
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
    p.add_argument(
        "--check", action="store_true",
        help="run and compare with the interpreter (and ONNX Runtime); exit 1 on a mismatch",
    )  # fmt: skip
    p.add_argument("--profile", action="store_true", help="per-kernel times as a table")
    p.add_argument("--report", action="store_true", help=REPORT_HELP)
    p.add_argument("--top", type=count(1), metavar="N", help="--profile: the N slowest")
    p.add_argument("--trace", metavar="OUT.json", help="a Chrome trace of a profiled run")
    p.add_argument("--json", action="store_true", help="a machine-readable report")
    p.add_argument(
        "--repeats", type=count(0), default=0,
        help="time this many runs (median; ORT's too with --check); --profile: 10",
    )  # fmt: skip
    p.add_argument("--sign-key", metavar="FILE.key", help="sign the -o file (egc keygen)")
    p.add_argument("--no-cache", action="store_true", help="compile even if cached; keep none")


def _add_run_parser(sub: Any) -> None:
    """`egc run`: a saved executable on inputs from files."""
    p_run = sub.add_parser("run", help="run a saved executable (egc compile -o)")
    p_run.add_argument("file", help="a file written by egc compile -o / Executable.save")
    p_run.add_argument(
        "--input", action="append", type=input_value, default=[], metavar="NAME=FILE.npy",
        help="an input array (.npy), or FILE.npz holding inputs by name",
    )  # fmt: skip
    p_run.add_argument("--random", action="store_true", help="random values for the rest")
    p_run.add_argument(
        "--dim", action="append", type=dim_value, default=[], metavar="NAME=N",
        help="with --random: a size variable's value (1 where not given)",
    )  # fmt: skip
    p_run.add_argument("--seed", type=count(0), default=0, help="for --random")
    p_run.add_argument("--output", metavar="OUT.npz", help="save the outputs by name")
    p_run.add_argument("--threads", type=count(0), help="threads (0: all; default: as saved)")
    p_run.add_argument("--profile", action="store_true", help="per-kernel times as a table")
    p_run.add_argument("--report", action="store_true", help=REPORT_HELP)
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


def _add_tune_parser(sub: Any) -> None:
    """`egc tune`: measure kernel choices for a model."""
    p_tune = sub.add_parser("tune", help="measure kernel choices for a model on this machine")
    p_tune.add_argument("model", help="an .onnx file or a built-in model name")
    p_tune.add_argument("--db", metavar="FILE.json", help="the kernel database (default: per CPU)")
    p_tune.add_argument("--threads", type=count(0), default=0, help="thread budget (0: all)")
    p_tune.add_argument(
        "--shape", action="append", type=shape_value, default=[], metavar="NAME=D1,D2,..",
        help="fix an ONNX input's symbolic dimensions",
    )  # fmt: skip
    p_tune.add_argument(
        "--config", action="append", type=config_value, default=[], metavar="KEY=VALUE",
        help="a PassContext config key for the build it measures (layout.blocked=false: NCHW)",
    )  # fmt: skip
    p_tune.add_argument(
        "--no-layouts", dest="layouts", action="store_false",
        help="skip timing the convolutions in each layout (the blocked-layout choice)",
    )  # fmt: skip


def _set_up_logging(args: argparse.Namespace) -> None:
    """-v/-vv/--log-level: the compiler's loggers (passes, JIT, placement) to stderr."""
    level = args.log_level or {0: None, 1: "info"}.get(args.verbose, "debug")
    if level is None:
        return
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr, format="egc: %(levelname)s %(name)s: %(message)s"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _set_up_logging(args)
    from ..compile_cache import CacheError

    try:
        return _dispatch(args)
    except CacheError as exc:
        print(f"egc: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("egc: error: out of memory (a shape too large for this machine?)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 1
    except Exception as exc:  # the compiler's own errors: one line, exit 2
        from egraph_ir.errors import CompilerError

        if isinstance(exc, CompilerError):
            print(f"egc: error: {exc}", file=sys.stderr)
            return 2
        raise


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "compile":
        from ..compile_cache import answer_from_cache
        from .args import compile_request

        answered = answer_from_cache(compile_request(args))  # before the compiler is imported
        if answered is not None:
            return answered
    if args.command == "cache":
        from ..compile_cache import cache_command

        return cache_command(args.action)
    if args.command in ("run", "tune"):
        from . import run as cli_run

        return cli_run.run_saved(args) if args.command == "run" else cli_run.tune_model(args)
    from . import commands

    if args.command == "keygen":
        return commands.keygen(args.name)
    if args.command == "rules":
        if args.rules_command == "explain":
            return commands.rules_explain(args)
        if args.rules_command == "list":
            return commands.rules_list(args.files, args.prove, args.timeout, args.max_examples)
        return commands.rules_check(
            args.files, args.max_examples, args.seed, args.timeout if args.prove else None
        )
    handlers = {
        "demo": lambda: commands.demo(args.model, args.show_ir),
        "compile": lambda: commands.compile_model(args),
        "opt": lambda: commands.opt(args),
        "list": lambda: commands.list_things(args.what),
    }
    return handlers[args.command]()


if __name__ == "__main__":
    sys.exit(main())
