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


def dim_value(text: str) -> tuple[str, int | tuple[int, int]]:
    """NAME=N: the value of a size variable (a symbolic dimension such as seq), or
    NAME=LOW..HIGH: the range its values take (codegen.size_bounds)."""
    name, sep, value = text.partition("=")
    try:
        if not sep or not name.strip():
            raise ValueError
        low, _, high = value.partition("..")
        sizes = (int(low), int(high)) if high else (int(low), int(low))
        if not 0 <= sizes[0] <= sizes[1]:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected NAME=N or NAME=LOW..HIGH with non-negative integers, got {text!r}"
        ) from None
    return name.strip(), sizes if high else sizes[0]


def split_dims(
    given: list[tuple[str, int | tuple[int, int]]],
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """--dim values as the sizes to check and time at (a range's upper bound) and the
    bounds to build with (codegen.size_bounds)."""
    sizes: dict[str, int] = {}
    bounds: dict[str, list[int]] = {}
    for name, value in given:
        if isinstance(value, tuple):
            bounds[name] = list(value)
            sizes[name] = value[1]
        else:
            sizes[name] = value
    return sizes, bounds


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


def _with_bounds(config: dict[str, Any], bounds: dict[str, list[int]]) -> dict[str, Any]:
    if bounds:
        config["codegen.size_bounds"] = {**config.get("codegen.size_bounds", {}), **bounds}
    return config


def _with_attribution(config: dict[str, Any], report: bool) -> dict[str, Any]:
    """--report says what each rule bought: eqsat.attribution on unless set."""
    if report:
        config.setdefault("eqsat.attribution", True)
    return config


def compile_request(args: argparse.Namespace) -> CompileRequest:
    """`egc compile`'s arguments as the typed request everything below the command line
    takes (names unchecked: commands.py checks them where the compiler is imported)."""
    targets = [t.strip() for t in (args.targets or "").split(",") if t.strip()]
    sizes, bounds = split_dims(args.dim)
    options = JobOptions(
        opt_level=args.opt_level,
        rules=list(args.rules),
        disabled=list(args.disable),
        print_ir_after=list(args.print_ir_after),
        check=args.check,
        repeats=args.repeats,
        config=_with_attribution(_with_bounds(dict(args.config), bounds), args.report),
        shapes=dict(args.shape),
        dims=sizes,
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
