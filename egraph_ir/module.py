"""IRModule: an immutable mapping from global names to functions, with `main` as the entry."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .errors import CompilerError, did_you_mean
from .expr import Expr, Function, GlobalVar


class IRModule:
    """Functions by global name. Immutable: `with_function` returns a new module."""

    __slots__ = ("_funcs", "typed")

    def __init__(self, functions: Mapping[Any, Function] | None = None) -> None:
        """functions: by name (str) or GlobalVar."""
        funcs: dict[str, Function] = {}
        for key, fn in (functions or {}).items():
            name = key.name_hint if isinstance(key, GlobalVar) else key
            if not isinstance(fn, Function):
                raise TypeError(f"@{name} must be a Function, got {type(fn).__name__}")
            funcs[name] = fn
        self._funcs = funcs
        self.typed = False  # infer_type ran on this module: its types are recorded

    @staticmethod
    def from_expr(expr: Expr, functions: Mapping[Any, Function] | None = None) -> IRModule:
        """A module whose main is expr (a function, or an expression whose free variables
        become the parameters)."""
        if not isinstance(expr, Function):
            from .visitor import free_vars

            expr = Function(tuple(dict.fromkeys(free_vars(expr))), expr)
        return IRModule({**(functions or {}), "main": expr})

    def __getitem__(self, key: str | GlobalVar) -> Function:
        name = key.name_hint if isinstance(key, GlobalVar) else key
        try:
            return self._funcs[name]
        except KeyError:
            raise CompilerError(
                f"no function @{name} in the module{did_you_mean(name, self._funcs)}; "
                f"functions: {', '.join('@' + n for n in self._funcs) or 'none'}"
            ) from None

    def functions_by_name(self) -> dict[str, Function]:
        """A copy of the name -> function table."""
        return dict(self._funcs)

    def same_functions(self, table: Mapping[str, Function]) -> bool:
        """Whether the module still holds exactly these function objects."""
        return self._funcs.keys() == table.keys() and all(
            self._funcs[k] is f for k, f in table.items()
        )

    def restore_functions(self, table: Mapping[str, Function]) -> None:
        """Put a table taken by functions_by_name back (undoing an in-place change)."""
        self._funcs = dict(table)
        self.typed = False

    def __setitem__(self, key: object, value: object) -> None:
        raise TypeError("IRModule is immutable; use mod.with_function(name, fn)")

    def __contains__(self, key: object) -> bool:
        name = key.name_hint if isinstance(key, GlobalVar) else key
        return name in self._funcs

    def __iter__(self) -> Iterator[str]:
        return iter(self._funcs)

    def __len__(self) -> int:
        return len(self._funcs)

    @property
    def functions(self) -> dict[GlobalVar, Function]:
        return {GlobalVar(n): f for n, f in self._funcs.items()}

    def items(self) -> list[tuple[str, Function]]:
        return list(self._funcs.items())

    def get_global_var(self, name: str) -> GlobalVar:
        self[name]  # raises with the known names
        return GlobalVar(name)

    def with_function(self, name: str | GlobalVar, fn: Function) -> IRModule:
        """A copy with one function added or replaced."""
        key = name.name_hint if isinstance(name, GlobalVar) else name
        return IRModule({**self._funcs, key: fn})

    def without(self, name: str) -> IRModule:
        return IRModule({k: f for k, f in self._funcs.items() if k != name})

    def astext(self, show_meta: bool = True) -> str:
        """The text format; without show_meta, large constants' values are left out."""
        from .text.printer import print_module

        return print_module(self, show_meta=show_meta)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        """The program itself (large constants as meta references), capped at 200 lines."""
        lines = self.astext(show_meta=False).splitlines()
        if len(lines) > 200:
            lines = [*lines[:200], f"... ({len(lines) - 200} more lines)"]
        return "IRModule:\n" + "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
