"""Typed configuration options for PassContext, registered once with a default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from egraph_ir.errors import ConfigError, did_you_mean


@dataclass(frozen=True, slots=True)
class ConfigOption:
    key: str
    type: type
    default: Any
    doc: str = ""

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
        return value


_OPTIONS: dict[str, ConfigOption] = {}


def register_config(key: str, type_: type, default: Any, doc: str = "") -> ConfigOption:
    """Declare a config key (e.g. 'eqsat.node_limit', int, 100_000); keys are unique."""
    if key in _OPTIONS:
        raise ConfigError(f"config '{key}' is already registered")
    option = ConfigOption(key, type_, None, doc)
    option = ConfigOption(key, type_, option.check(default), doc)
    _OPTIONS[key] = option
    return option


def config_option(key: str) -> ConfigOption:
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
