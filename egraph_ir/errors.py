"""The error hierarchy every layer raises, and source spans.

Messages read `<where>: <what>[; <hint>]`: lower case, no trailing period, user names quoted.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Span:
    """A place in a source: a text file (1-based line and column), or a named node of a
    model (`name`: an ONNX node's name, `line`: its position in the graph)."""

    file: str
    line: int
    col: int = 0
    name: str = ""

    @staticmethod
    def join(spans: Iterable[Span | None]) -> Span | None:
        """One span for the nodes of several (the names in source order, joined with
        ' + '), for a call that computes what they did; None if none is known."""
        known = sorted({s for s in spans if s is not None}, key=lambda s: (s.line, s.name))
        if not known:
            return None
        names = dict.fromkeys(n for s in known for n in s.name.split(" + ") if n)
        first = known[0]
        return Span(first.file, first.line, first.col, " + ".join(names))

    def __str__(self) -> str:
        if self.name:
            return self.name
        return f"{self.file}:{self.line}:{self.col}" if self.col else f"{self.file}:{self.line}"


class CompilerError(Exception):
    """Base class of every error this compiler raises on bad input."""


class ParseError(CompilerError):
    """Malformed IR text (the message starts with `line:col`)."""


class TypeInferenceError(CompilerError):
    """A program is ill-typed: wrong shapes, dtypes or arity, or an unbound variable."""


class UnboundVariableError(TypeInferenceError):
    """A variable is used where no function parameter or let binds it."""


class UnknownOpError(CompilerError, KeyError):
    """An op name that the registry does not know."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class UnknownNameError(CompilerError, KeyError):
    """A name the user gave (a built-in model, a kernel) that is not one of the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class AttrError(CompilerError, TypeError):
    """An unknown, missing or ill-typed op attribute."""


class RuleError(CompilerError):
    """A malformed or invalid rewrite rule (names `file:line:col`)."""


class PassError(CompilerError):
    """A pass failed; names the pass and the passes that ran before it."""


class ConfigError(CompilerError):
    """An unknown pass, config key or option value."""


class FrontendError(CompilerError):
    """A model cannot be imported: unreadable file, unsupported ops, bad shapes (names nodes)."""


class ConstantInputError(FrontendError):
    """An ONNX input that sets a static attribute (axes, shape, bounds) is not a constant.
    `tensor` names it and `inputs` the graph inputs it is computed from, so a caller that
    knows their values can bind them and import again."""

    def __init__(self, message: str, tensor: str, inputs: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.tensor = tensor
        self.inputs = inputs or (tensor,)


class CodegenError(CompilerError):
    """Code generation cannot handle a program (unsupported op, target or parameter)."""


class MissingExtraError(CompilerError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


EXTRAS = {"onnxruntime": "onnxruntime", "hypothesis": "testing"}  # module -> pip extra


def require(module: str, purpose: str) -> Any:
    """Import an optional dependency, or say which extra brings it: `require("hypothesis",
    "rules.check_soundness")`."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRAS.get(module.split(".")[0], "all")
        raise MissingExtraError(
            f"{purpose} needs the optional package '{module.split('.')[0]}' ({exc}); "
            f"install it with: pip install 'egraph-compiler[{extra}]'"
        ) from None


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the closest known name, or ''."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
