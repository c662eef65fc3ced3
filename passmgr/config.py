"""Typed configuration options for PassContext, registered once with a default."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
DECLARING_PACKAGES = ("codegen", "rules", "egraph_ir")  # packages that register options


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


def config_option(key: str) -> ConfigOption:
    """The option of a key. A key of one of the project's packages that is not imported
    yet (`codegen.*` before `import codegen`) imports that package first, so its options
    exist without the user importing it."""
    if key not in _OPTIONS and isinstance(key, str):
        package = key.split(".", 1)[0]
        if package in DECLARING_PACKAGES and package not in sys.modules:
            importlib.import_module(package)
    try:
        return _OPTIONS[key]
    except KeyError:
        raise ConfigError(
            f"unknown config key '{key}'{did_you_mean(key, _OPTIONS)}; "
            f"known: {', '.join(sorted(_OPTIONS))}"
        ) from None


def list_configs() -> dict[str, ConfigOption]:
    """All registered options by key."""
    return dict(sorted(_OPTIONS.items()))


register_config(
    "pass.bisect_limit",
    int,
    -1,
    "run only the first N optional passes (-1: all); always-run passes still run",
)
