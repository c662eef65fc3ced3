"""Typed configuration options for PassContext, registered once with a default.

Each package declares its keys in its own module (`codegen/options.py` declares the
`codegen.*` keys). A key used before its package is imported is found through the
`egraph_compiler.config` entry points (pyproject.toml): the entry point named like the
key's prefix names the module that declares it. Text (command lines, pipeline text) becomes
a typed value through one converter, `parse_text`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from egraph_ir.errors import CompilerError, ConfigError, did_you_mean


@dataclass(frozen=True, slots=True)
class ConfigOption:
    key: str
    type: type
    default: Any
    doc: str = ""
    choices: tuple[Any, ...] | Callable[[], Iterable[Any]] = ()  # allowed values, if limited
    validate: Callable[[Any], object] | None = None  # raises CompilerError on a bad value

    def allowed(self) -> tuple[Any, ...]:
        return tuple(self.choices() if callable(self.choices) else self.choices)

    def parse(self, text: str) -> Any:
        """The value a text (command line, pipeline text) gives, checked."""
        return self.check(parse_text(text, self.type, f"config '{self.key}'"))

    def check(self, value: Any) -> Any:
        """Return value converted to the option's type, or raise ConfigError."""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if self.type is int and isinstance(value, bool):
            ok = False
        else:
            ok = isinstance(value, self.type)
        if ok and self.type is float and value != value:
            raise ConfigError(f"config '{self.key}' expects a number, got NaN")
        if not ok:
            raise ConfigError(
                f"config '{self.key}' expects {self.type.__name__}, got {value!r} "
                f"({type(value).__name__})"
            )
        allowed = self.allowed()
        if allowed and value not in allowed:
            raise ConfigError(
                f"config '{self.key}' must be one of {', '.join(map(str, allowed))}; "
                f"got {value!r}{did_you_mean(str(value), [str(a) for a in allowed])}"
            )
        if self.validate is not None:
            try:
                self.validate(value)
            except CompilerError as why:
                raise ConfigError(f"config '{self.key}': {why}") from None
        return value


_OPTIONS: dict[str, ConfigOption] = {}
ENTRY_POINTS = "egraph_compiler.config"  # name: a key prefix; value: the declaring module


def register_config(
    key: str,
    type_: type,
    default: Any,
    doc: str = "",
    choices: tuple[Any, ...] | Callable[[], Iterable[Any]] = (),
    validate: Callable[[Any], object] | None = None,
) -> ConfigOption:
    """Declare a config key (e.g. 'eqsat.node_limit', int, 100_000); keys are unique.
    `choices` limits the values (a tuple, or a function giving them, for registries);
    `validate(value)` checks anything else when the value is given (a CompilerError)."""
    if key in _OPTIONS:
        raise ConfigError(f"config '{key}' is already registered")
    option = ConfigOption(key, type_, default, doc, choices, validate)
    option.check(default)
    _OPTIONS[key] = option
    return option


def _declaring_modules(prefix: str) -> list[metadata.EntryPoint]:
    return [ep for ep in metadata.entry_points(group=ENTRY_POINTS) if ep.name == prefix]


def config_option(key: str) -> ConfigOption:
    """The option of a key. A key whose declaring module is not imported yet (`codegen.*`
    before `import codegen`) is found through its entry point, which imports it."""
    if key not in _OPTIONS and isinstance(key, str):
        for ep in _declaring_modules(key.split(".", 1)[0]):
            ep.load()
    try:
        return _OPTIONS[key]
    except KeyError:
        raise ConfigError(
            f"unknown config key '{key}'{did_you_mean(key, _OPTIONS)}; "
            f"known: {', '.join(sorted(_OPTIONS))}"
        ) from None


def list_configs() -> dict[str, ConfigOption]:
    """All options by key, those of packages not imported yet included."""
    for ep in metadata.entry_points(group=ENTRY_POINTS):
        ep.load()
    return dict(sorted(_OPTIONS.items()))


def parse_text(raw: str, type_: Any, what: str) -> Any:
    """A text as a value of type_ (bool: true/false/1/0; int; float; dict and list as
    JSON; str as is), or a ConfigError naming `what`."""
    text = raw.strip()
    try:
        if type_ is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if type_ in (int, float):
            return type_(text)
        if type_ in (dict, list):  # JSON: --config 'codegen.external_options={"t": {...}}'
            value = json.loads(text)
            if not isinstance(value, type_):
                raise ValueError(text)
            return value
    except ValueError:
        name = getattr(type_, "__name__", str(type_))
        raise ConfigError(f"{what} expects {name}, got {raw!r}") from None
    return raw


register_config(
    "pass.bisect_limit",
    int,
    -1,
    "run only the first N optional passes (-1: all); always-run passes still run",
)
