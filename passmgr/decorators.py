"""`module_pass` and `function_pass`: turn a function or a class into a pass.

Bare or with arguments. On a function, the result is a pass instance; on a class, a pass
class whose instances run its `transform_module` / `transform_function`. Signatures are
checked when decorating, not when the pass first runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from egraph_ir.errors import ConfigError
from egraph_ir.expr import Function
from egraph_ir.module import IRModule

from .context import PassContext
from .pass_base import FunctionPass, ModulePass


def _check_signature(fn: Callable[..., Any], params: Sequence[str], what: str) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    positional = [
        p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
    required = [p for p in positional if p.default is p.empty]
    if not varargs and not (len(required) <= len(params) <= len(positional)):
        got = ", ".join(sig.parameters)
        raise TypeError(
            f"{what} '{getattr(fn, '__name__', fn)}' must take "
            f"({', '.join(params)}); it takes ({got})"
        )


def _make(
    kind: str,
    target: Any,
    opt_level: int | None,
    name: str | None,
    required: Sequence[str],
    always_run: bool,
) -> Any:
    if opt_level is None:
        raise ConfigError(
            f"{kind}: please provide opt_level for '{getattr(target, '__name__', target)}'"
        )
    if isinstance(required, str) or not isinstance(required, list | tuple):
        raise ConfigError(f"{kind}: required must be a list or tuple of names, got {required!r}")
    base = ModulePass if kind == "module_pass" else FunctionPass
    method = "transform_module" if kind == "module_pass" else "transform_function"
    params = ("mod", "ctx") if kind == "module_pass" else ("func", "mod", "ctx")
    attrs: dict[str, Any] = {
        "opt_level": opt_level,
        "required": tuple(required),
        "always_run": always_run,
        "pass_name": name or target.__name__,
    }
    if inspect.isclass(target):
        impl = getattr(target, method, None)
        if impl is None:
            raise TypeError(f"{kind} class '{target.__name__}' must define {method}")
        _check_signature(impl, ("self", *params), f"{target.__name__}.{method}")
        return type(
            target.__name__,
            (target, base),
            {**attrs, "__doc__": target.__doc__, "__module__": target.__module__},
        )
    if not callable(target):
        raise TypeError(f"{kind} decorates a function or a class, got {type(target).__name__}")
    _check_signature(target, params, f"{kind} function")
    cls = type(
        attrs["pass_name"],
        (_WrappedModulePass if kind == "module_pass" else _WrappedFunctionPass,),
        attrs,
    )
    return cls(target)


class _WrappedModulePass(ModulePass):
    def __init__(self, fn: Callable[[IRModule, PassContext], IRModule]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.fn(mod, ctx)


class _WrappedFunctionPass(FunctionPass):
    def __init__(self, fn: Callable[[Function, IRModule, PassContext], Function]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        return self.fn(fn, mod, ctx)


def module_pass(
    target: Any = None,
    *,
    opt_level: int | None = None,
    name: str | None = None,
    required: Sequence[str] = (),
    always_run: bool = False,
) -> Any:
    """Make a module pass from `f(mod, ctx) -> IRModule` or a class with `transform_module`."""
    if target is None:
        return lambda t: _make("module_pass", t, opt_level, name, required, always_run)
    return _make("module_pass", target, opt_level, name, required, always_run)


def function_pass(
    target: Any = None,
    *,
    opt_level: int | None = None,
    name: str | None = None,
    required: Sequence[str] = (),
    always_run: bool = False,
) -> Any:
    """Make a function pass from `f(func, mod, ctx) -> Function` or a class with
    `transform_function`."""
    if target is None:
        return lambda t: _make("function_pass", t, opt_level, name, required, always_run)
    return _make("function_pass", target, opt_level, name, required, always_run)
