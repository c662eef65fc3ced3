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

from .pass_base import Pass, Sequential
from .registry import get_pass, pass_factory

_TOKEN = re.compile(r"\s*([A-Za-z_./~][\w.\-/+~]*|-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[(),=\[\]])")


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ConfigError(f"pipeline: unexpected {text[pos : pos + 10]!r} at column {pos + 1}")
        out.append(m.group(1))
        pos = m.end()
    return out


def parse_pipeline(text: str) -> Sequential:
    """Build a Sequential from pipeline text; unknown passes and options are errors."""
    toks = _tokens(text)
    i = 0
    passes: list[Pass] = []

    def expect(t: str) -> None:
        nonlocal i
        if i >= len(toks) or toks[i] != t:
            found = toks[i] if i < len(toks) else "end of text"
            raise ConfigError(f"pipeline: expected '{t}', found '{found}'")
        i += 1

    def value() -> Any:
        nonlocal i
        if i < len(toks) and toks[i] == "[":
            i += 1
            items = []
            while toks[i] != "]":
                items.append(value())
                if toks[i] == ",":
                    i += 1
            expect("]")
            return items
        if i >= len(toks):
            raise ConfigError("pipeline: missing option value")
        tok = toks[i]
        i += 1
        return tok

    while i < len(toks):
        name = toks[i]
        i += 1
        options: dict[str, Any] = {}
        if i < len(toks) and toks[i] == "(":
            i += 1
            while toks[i] != ")":
                key = toks[i]
                i += 1
                expect("=")
                options[key] = value()
                if toks[i] == ",":
                    i += 1
            expect(")")
        passes.append(get_pass(name, **_convert_options(name, options)))
        if i < len(toks):
            expect(",")
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
    try:
        if hint is bool:
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1")
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
    except ValueError:
        raise ConfigError(
            f"pass '{name}': option '{key}' expects {hint.__name__}, got {raw!r}"
        ) from None
    return raw
