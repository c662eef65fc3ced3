"""Textual pipelines: `parse_pipeline("InferType,EqSat(rules=algebraic,node_limit=20000)")`.

Grammar: a comma-separated list of `Name` or `Name(key=value,...)`; values are numbers,
true/false, bare words, or `[a,b]` lists, converted to the types of the pass's options.
`str(parse_pipeline(text))` prints the same text back (options equal to their defaults are
left out).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any

from egraph_ir.errors import ConfigError

from .config import parse_text
from .pass_base import Pass
from .registry import get_pass, pass_factory
from .sequential import Sequential

_TOKEN = re.compile(r"\s*([A-Za-z_./~][\w.\-/+~]*|-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[(),=\[\]])")


def _tokens(text: str) -> list[tuple[str, int]]:
    """(token, column) pairs; columns count from 1."""
    out, pos = [], 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        m = _TOKEN.match(text, pos)
        if not m:
            raise ConfigError(f"pipeline: unexpected {text[pos : pos + 10]!r} at column {pos + 1}")
        out.append((m.group(1), m.start(1) + 1))
        pos = m.end()
    return out


class _Reader:
    """A cursor over the tokens; every error names the column (or the end of the text)."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.end = len(text) + 1
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def where(self) -> str:
        if self.i < len(self.toks):
            tok, col = self.toks[self.i]
            return f"'{tok}' at column {col}"
        return f"end of text at column {self.end}"

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ConfigError(f"pipeline: text ends early ({self.where()})")
        self.i += 1
        return tok

    def expect(self, t: str, alternative: str = "") -> None:
        if self.peek() != t:
            also = f" or '{alternative}'" if alternative else ""
            raise ConfigError(f"pipeline: expected '{t}'{also}, found {self.where()}")
        self.i += 1

    def name(self, what: str) -> str:
        tok = self.peek()
        if tok is None or not (tok[0].isalpha() or tok[0] == "_"):
            raise ConfigError(f"pipeline: expected {what}, found {self.where()}")
        self.i += 1
        return tok

    def value(self) -> Any:
        if self.peek() == "[":
            self.i += 1
            items = []
            while self.peek() != "]":
                items.append(self.value())
                if self.peek() != "]":
                    self.expect(",", "]")
            self.expect("]")
            return items
        tok = self.peek()
        if tok is None or tok in "(),=]":
            raise ConfigError(f"pipeline: expected an option value, found {self.where()}")
        self.i += 1
        return tok


def parse_pipeline(text: str) -> Sequential:
    """Build a Sequential from pipeline text; unknown passes and options, and malformed
    text, are ConfigErrors naming the column."""
    if not isinstance(text, str):
        raise ConfigError(f"pipeline text must be a string, got {type(text).__name__}")
    r = _Reader(text)
    passes: list[Pass] = []
    while r.peek() is not None or passes:
        name = r.name("a pass name")
        options: dict[str, Any] = {}
        if r.peek() == "(":
            r.i += 1
            while r.peek() != ")":
                key = r.name("an option name")
                r.expect("=")
                options[key] = r.value()
                if r.peek() != ")":
                    r.expect(",", ")")
            r.expect(")")
        passes.append(get_pass(name, **_convert_options(name, options)))
        if r.peek() is None:
            break
        r.expect(",")
    return Sequential(passes)


def _convert_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    factory = pass_factory(name)
    try:
        params = inspect.signature(factory).parameters
        hints = typing.get_type_hints(factory) if inspect.isclass(factory) else {}
    except (TypeError, ValueError, NameError):
        params, hints = {}, {}  # type: ignore[assignment]
    out = {}
    for key, raw in options.items():
        if key not in params:
            known = ", ".join(p for p in params if p != "self") or "none"
            raise ConfigError(f"pass '{name}' has no option '{key}'; options: {known}")
        out[key] = _coerce(raw, hints.get(key, params[key].annotation), name, key)
    return out


def _coerce(raw: Any, hint: Any, name: str, key: str) -> Any:
    options = [a for a in typing.get_args(hint) if a is not type(None)]
    if options and typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = options[0]  # X | None, X | Y: convert to the first alternative
    if isinstance(raw, list):
        inner = typing.get_args(hint)[0] if typing.get_args(hint) else str
        return tuple(_coerce(r, inner, name, key) for r in raw)
    if hint in (bool, int, float):
        return parse_text(raw, hint, f"pass '{name}': option '{key}'")
    return raw
