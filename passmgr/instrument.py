"""Pass instruments: hooks around every pass run in a PassContext, and the stock ones.

Hooks (all optional): enter_pass_ctx(), exit_pass_ctx(), should_run(mod, info) -> bool,
run_before_pass(mod, info), run_after_pass(mod, info). They are called in the order of the
context's instrument list; see PassContext for the exception rules.
"""

from __future__ import annotations

import difflib
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from egraph_ir.errors import PassError
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.visitor import free_vars

from .info import PassInfo
from .names import check_pass_names

HOOKS = ("enter_pass_ctx", "exit_pass_ctx", "should_run", "run_before_pass", "run_after_pass")


class PassInstrument:
    """Base class; override the hooks you need."""

    def enter_pass_ctx(self) -> None:
        return None

    def exit_pass_ctx(self) -> None:
        return None

    def should_run(self, mod: IRModule, info: PassInfo) -> bool:
        return True

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        return None

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        return None

    def run_failed_pass(self, mod: IRModule, info: PassInfo) -> None:
        """The pass raised (run_after_pass is not called for it); `mod` is its input."""


def pass_instrument(cls: type) -> type:
    """Make an instrument class from a plain class that defines some of the hooks."""
    if not isinstance(cls, type):
        raise TypeError(f"pass_instrument decorates a class, got {type(cls).__name__}")
    if not any(h in vars(cls) for h in HOOKS):
        raise TypeError(f"instrument '{cls.__name__}' defines none of {', '.join(HOOKS)}")
    return type(
        cls.__name__, (cls, PassInstrument), {"__doc__": cls.__doc__, "__module__": cls.__module__}
    )


def _selected(info: PassInfo, passes: Iterable[str] | None) -> bool:
    return passes is None or info.name in passes


# ---------------------------------------------------------------- timing
@dataclass
class TimingNode:
    name: str
    seconds: float = 0.0
    children: list[TimingNode] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "children": [c.to_dict() for c in self.children],
        }


class PassTimingInstrument(PassInstrument):
    """Wall time of every pass, as a tree that follows nested Sequentials."""

    def __init__(self) -> None:
        self.root = TimingNode("total")
        self._open: list[tuple[TimingNode, float]] = []

    def enter_pass_ctx(self) -> None:
        self.root = TimingNode("total")
        self._open = []

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        parent = self._open[-1][0] if self._open else self.root
        node = TimingNode(info.name)
        parent.children.append(node)
        self._open.append((node, time.perf_counter()))

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        node, start = self._open.pop()
        node.seconds = time.perf_counter() - start

    def run_failed_pass(self, mod: IRModule, info: PassInfo) -> None:
        node, start = self._open.pop()
        node.seconds = time.perf_counter() - start
        node.name += " (failed)"

    def exit_pass_ctx(self) -> None:
        now = time.perf_counter()
        while self._open:  # a pass raised: close what was open
            node, start = self._open.pop()
            node.seconds = now - start
        self.root.seconds = sum(c.seconds for c in self.root.children)

    def to_dict(self) -> dict[str, Any]:
        return self.root.to_dict()

    def render(self) -> str:
        lines: list[str] = []
        stack = [(self.root, 0)]
        while stack:
            node, depth = stack.pop()
            lines.append(f"{'  ' * depth}{node.name}: {node.seconds * 1e3:.3f} ms")
            stack.extend((c, depth + 1) for c in reversed(node.children))
        return "\n".join(lines)


# ---------------------------------------------------------------- printing
class PrintIRBefore(PassInstrument):
    """Print the module before the named passes (all when passes is None)."""

    def __init__(self, passes: Iterable[str] | None = None, out: TextIO | None = None) -> None:
        self.passes = None if passes is None else set(passes)
        check_pass_names(type(self).__name__, sorted(self.passes or ()))
        self.out = out

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        if _selected(info, self.passes):
            print(
                f"// IR before {info.name}\n{mod.astext(show_meta=False)}",
                file=self.out or sys.stdout,
            )


class PrintIRAfter(PassInstrument):
    """Print the module after the named passes (all when passes is None)."""

    def __init__(self, passes: Iterable[str] | None = None, out: TextIO | None = None) -> None:
        self.passes = None if passes is None else set(passes)
        check_pass_names(type(self).__name__, sorted(self.passes or ()))
        self.out = out

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        if _selected(info, self.passes):
            print(
                f"// IR after {info.name}\n{mod.astext(show_meta=False)}",
                file=self.out or sys.stdout,
            )


class PrintIRAfterChange(PassInstrument):
    """Print a unified diff after each pass that changed the module's text."""

    def __init__(self, passes: Iterable[str] | None = None, out: TextIO | None = None) -> None:
        self.passes = None if passes is None else set(passes)
        check_pass_names(type(self).__name__, sorted(self.passes or ()))
        self.out = out
        self._before: list[str] = []

    def enter_pass_ctx(self) -> None:
        self._before = []

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        self._before.append(mod.astext(show_meta=False))

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        before = self._before.pop()
        if not _selected(info, self.passes):
            return
        after = mod.astext(show_meta=False)
        if after != before:
            diff = difflib.unified_diff(
                before.splitlines(),
                after.splitlines(),
                f"before {info.name}",
                f"after {info.name}",
                lineterm="",
            )
            print("\n".join(diff), file=self.out or sys.stdout)


# ---------------------------------------------------------------- verification
def verify_module(mod: IRModule) -> None:
    """Raise if a function has free variables or does not type-check."""
    for name, fn in mod.items():
        unbound = free_vars(fn)
        if unbound:
            names = ", ".join(sorted({f"%{v.name_hint}" for v in unbound}))
            raise PassError(f"@{name} uses unbound variable(s) {names}")
    infer_type(mod)


class VerifyEach(PassInstrument):
    """Check well-formedness and types after every pass; name the pass that broke the IR."""

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        try:
            verify_module(mod)
        except Exception as exc:
            raise PassError(
                f"VerifyEach: the module is ill-formed after pass '{info.name}': {exc}"
            ) from exc
