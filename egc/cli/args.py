"""The command line's argument types (KEY=VALUE, shapes, counts, seconds, files). Light on
purpose: `egc` builds its parser, and answers a compile from its cache, before importing the
compiler."""

from __future__ import annotations

import argparse
from typing import Any

from ..options import CompileRequest, JobOptions


def config_value(text: str) -> tuple[str, Any]:
    """KEY=VALUE for a registered config key, VALUE converted to the key's type."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    from egraph_ir.errors import CompilerError  # only with --config: the fast path stays light
    from passmgr.config import config_option

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


def dim_value(text: str) -> tuple[str, int]:
    """NAME=N: the value of a size variable (a symbolic dimension such as seq)."""
    name, sep, value = text.partition("=")
    try:
        if not sep or not name.strip():
            raise ValueError
        size = int(value)
        if size < 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected NAME=N with a non-negative integer, got {text!r}"
        ) from None
    return name.strip(), size


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


# options that need the optimised IR, and options that run what was compiled
IR_OPTIONS = ("dot", "egraph_dot", "emit_onnx", "print_ir_after", "time_passes")
RUN_OPTIONS = ("check", "repeats", "profile", "report", "trace", "sign_key")


def compile_request(args: argparse.Namespace) -> CompileRequest:
    """`egc compile`'s arguments as the typed request everything below the command line
    takes (names unchecked: commands.py checks them where the compiler is imported)."""
    targets = [t.strip() for t in (args.targets or "").split(",") if t.strip()]
    options = JobOptions(
        opt_level=args.opt_level,
        rules=list(args.rules),
        disabled=list(args.disable),
        print_ir_after=list(args.print_ir_after),
        check=args.check,
        repeats=args.repeats,
        config=dict(args.config),
        shapes=dict(args.shape),
        dims=dict(args.dim),
        targets=targets,
        place=args.place,
    )
    return CompileRequest(
        model=args.model,
        options=options,
        output=args.output,
        json=args.json,
        use_cache=not args.no_cache,
        needs_ir=any(getattr(args, name) for name in IR_OPTIONS),
        runs=any(getattr(args, name) for name in RUN_OPTIONS),
    )
