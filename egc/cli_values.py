"""The command line's argument parsers (KEY=VALUE, shapes, counts, seconds) and output
helpers (tables, reports, files), shared by the commands in egc/cli.py and egc/cli_run.py."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codegen.executable import aligned
from egraph_ir.errors import CompilerError, did_you_mean
from passmgr.config import config_option


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
