"""The pass registry: names to pass factories, for `get_pass`, `required` and pipelines."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from egraph_ir.errors import ConfigError, did_you_mean

from .pass_base import Pass

_PASSES: dict[str, Callable[..., Pass]] = {}
T = TypeVar("T")


def register_pass[T](target: T, name: str | None = None) -> T:
    """Register a pass class (its options are constructor arguments) or a pass instance.

    Usable as a decorator on a pass class. A second registration of a name is an error.
    """
    if inspect.isclass(target) and issubclass(target, Pass):
        factory: Callable[..., Pass] = target
        key = name or target.pass_name or target.__name__
    elif isinstance(target, Pass):
        instance = target

        def factory(**options: Any) -> Pass:
            if options:
                raise ConfigError(f"pass '{key}' takes no options, got {', '.join(options)}")
            return instance

        key = name or target.info.name
    else:
        raise TypeError(f"register_pass takes a Pass class or instance, got {target!r}")
    if key in _PASSES:
        raise ConfigError(f"pass '{key}' is already registered")
    _PASSES[key] = factory
    return target


def get_pass(name: str, **options: Any) -> Pass:
    """A pass by registered name, built with the given options."""
    try:
        factory = _PASSES[name]
    except KeyError:
        raise ConfigError(
            f"unknown pass '{name}'{did_you_mean(name, _PASSES)}; known: {', '.join(list_passes())}"
        ) from None
    try:
        return factory(**options)
    except TypeError as exc:
        raise ConfigError(f"pass '{name}': bad options {options}: {exc}") from None


def list_passes() -> list[str]:
    return sorted(_PASSES)


def pass_factory(name: str) -> Callable[..., Pass]:
    """The factory registered under name (its parameters are the pass's options)."""
    if name not in _PASSES:
        get_pass(name)  # raises, listing the known names
    return _PASSES[name]
