"""The command line's output helpers (tables, reports, files) and rule sources, shared by
the commands in egc/cli/commands.py and egc/cli/run.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from codegen.runtime.profile import aligned
from egraph_ir.errors import CompilerError, did_you_mean


# ---------------------------------------------------------------- output helpers
def print_table(title: str, header: Sequence[str], rows: list[list[str]]) -> None:
    """A table: rich (with colour) on a terminal, aligned plain text otherwise."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for h in header:
            table.add_column(h, overflow="fold")  # long names wrap, never cut
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
