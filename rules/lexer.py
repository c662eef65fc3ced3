"""The tokens and lines of rule text: numbers with dtype suffixes, names, punctuation; a
line knows its file and number so every error names `file:line:col`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from egraph_ir.errors import RuleError

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<arrow><=>|=>)
      | (?P<wrongarrow>->|<->|-->|==>|<==>)
      | (?P<cmp>==|!=|<=|>=|<|>)
      | (?P<var>\?[A-Za-z_]\w*)
      | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf|nan)
          (?:f16|f32|f64|f|i8|i16|i32|i64|u8)?(?![\w.]))
      | (?P<string>"[^"\n]*")
      | (?P<ident>[A-Za-z_][\w-]*)
      | (?P<punct>[()\[\],=.?])
      | (?P<bad>.)""",
    re.VERBOSE,
)
SUFFIX = re.compile(r"(f16|f32|f64|f|i8|i16|i32|i64|u8)$")


def number(text: str) -> int | float:
    """A numeric literal; a dtype suffix as in the IR text (1f, 0.5f, 2i64) is accepted and
    only its value counts: a pattern's literal takes the dtype of what it matches or makes."""
    suffix = SUFFIX.search(text) if not text.endswith("inf") else None
    body = text[: suffix.start()] if suffix else text
    is_float = any(c in body for c in ".eEin") or (suffix is not None and suffix.group(1)[0] == "f")
    return float(body) if is_float else int(body)


SCALAR_ATTR_KINDS = ("int", "float", "bool")
MAX_NESTING = 64  # lists in attributes and guards; keeps recursive descent shallow
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str
    col: int


class Line:
    """Tokens of one line with error reporting at file:line:col."""

    def __init__(self, text: str, source: str, line: int, first_col: int = 1) -> None:
        self.source, self.line = source, line
        self.toks: list[Tok] = []
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup or "bad"
            if kind == "ws":
                continue
            tok = Tok(kind, m.group(), first_col + m.start())
            if kind == "bad":
                raise self.error(f"unexpected character {m.group()!r}", tok)
            if kind == "wrongarrow":
                raise self.error(
                    f"'{m.group()}' is not an arrow here: write '=>' (left to right) or "
                    "'<=>' (both directions)",
                    tok,
                )
            self.toks.append(tok)
        self.end_col = first_col + len(text)
        self.i = 0

    def error(self, msg: str, tok: Tok | None = None) -> RuleError:
        col = tok.col if tok else (self.tok.col if self.tok else self.end_col)
        return RuleError(f"{self.source}:{self.line}:{col}: {msg}")

    @property
    def tok(self) -> Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def at(self, text: str) -> bool:
        return self.tok is not None and self.tok.text == text

    def next(self) -> Tok:
        tok = self.tok
        if tok is None:
            raise self.error("unexpected end of line")
        self.i += 1
        return tok

    def expect(self, text: str) -> Tok:
        if not self.at(text):
            found = self.tok.text if self.tok else "end of line"
            raise self.error(f"expected '{text}', found '{found}'")
        return self.next()

    def done(self) -> None:
        if self.tok is not None:
            raise self.error(f"unexpected '{self.tok.text}'")


# ---------------------------------------------------------------- patterns


def source_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """(line number, indent, text) of each line that is not blank or a comment; rule files
    and pattern tables share this layout."""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.split("#", 1)[0].rstrip()
        if stripped.strip():
            yield lineno, len(stripped) - len(stripped.lstrip()), stripped.strip()


def read_source(path: str | Path, what: str) -> str:
    """A rule file's or pattern table's text; unreadable or non-UTF-8 files are RuleErrors."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError(f"{p}: cannot read {what} ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise RuleError(
            f"{p}:{line}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None
