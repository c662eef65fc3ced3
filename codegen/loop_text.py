"""A loop-IR body as text, each distinct expression written once: the key equal kernels
share code by (code_key, build.share_identical_kernels).

`repr(body)` writes an expression as often as it is used: a requantized value read by a
clamp, a select and a store is written three times, its operands nine, and a fused chain
of int8 kernels became megabytes of text (2.5 s of EfficientNet-B0's int8 build went to
those reprs). Here every distinct expression gets a number at its first use and is
written once as `#n = Type(fields, #operands)`; later uses write `#n`. Two bodies get the
same text exactly when they are built alike (the numbering follows the statements'
order), whatever objects they share.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from .loop_ir import Assign, Declare, For, Kernel, LExpr, Stmt, Store, unseen_post_order

_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}  # type -> (name, is an operand)


def body_text(body: list[Stmt]) -> str:
    """The body's statements, one a line, over a numbered list of its expressions."""
    return _Writer().body(body)


def kernel_text(kernel: Kernel) -> str:
    """The kernel's body as text, made once (kept in Kernel.body_key)."""
    if not kernel.body_key:
        kernel.body_key = body_text(kernel.body)
    return kernel.body_key


def code_key(kernel: Kernel) -> str:
    """What the emitted code depends on (codegen/llvm/emit.py): not the extent, work or
    buffer shapes, which only the caller uses."""
    buffers = [(b.name, b.dtype) for b in kernel.buffers]
    return repr((kernel.name, buffers, kernel.unroll, kernel.size_names)) + kernel_text(kernel)


class _Writer:
    def __init__(self) -> None:
        self.numbers: dict[int, int] = {}  # id(expression) -> its number
        self.by_text: dict[str, int] = {}  # equal expressions built twice: one number
        self.kept: list[LExpr] = []  # alive, so no id is reused while writing
        self.lines: list[str] = []

    def body(self, body: list[Stmt]) -> str:
        todo: list[tuple[Stmt, int] | str] = [(s, 0) for s in reversed(body)]
        while todo:
            item = todo.pop()
            if isinstance(item, str):
                self.lines.append(item)
                continue
            s, depth = item
            pad = " " * depth
            if isinstance(s, For):
                attrs = [getattr(s, f.name) for f in fields(s) if f.name not in ("body", "stop")]
                stop = "" if s.stop is None else f" stop {self.number(s.stop)}"
                self.lines.append(f"{pad}for {attrs!r}{stop}")
                todo.append(f"{pad}end")
                todo += [(child, depth + 1) for child in reversed(s.body)]
            elif isinstance(s, Store):
                at, value = self.number(s.index), self.number(s.value)
                self.lines.append(f"{pad}store {s.buffer}[#{at}] = #{value}")
            elif isinstance(s, Declare):
                self.lines.append(f"{pad}declare {s.name} = #{self.number(s.init)}")
            elif isinstance(s, Assign):
                self.lines.append(f"{pad}assign {s.name} = #{self.number(s.value)}")
            else:
                self.lines.append(f"{pad}{s!r}")
        return "\n".join(self.lines)

    def number(self, root: LExpr) -> int:
        """The number of `root`, writing the lines of it and of its operands not written
        yet (post-order, by a worklist: fused chains are deep)."""
        for e in unseen_post_order(root, self.numbers):
            parts: list[Any] = []
            for name, operand in _fields_of(e):
                value = getattr(e, name)
                parts.append(f"#{self.numbers[id(value)]}" if operand else repr(value))
            text = f"{type(e).__name__}({', '.join(parts)})"
            number = self.by_text.get(text)
            if number is None:
                number = self.by_text[text] = len(self.by_text)
                self.lines.append(f"#{number} = {text}")
            self.numbers[id(e)] = number
            self.kept.append(e)
        return self.numbers[id(root)]


def _fields_of(e: LExpr) -> tuple[tuple[str, bool], ...]:
    spec = _FIELDS.get(type(e))
    if spec is None:
        spec = tuple((f.name, f.type == "LExpr") for f in fields(e))
        _FIELDS[type(e)] = spec
    return spec
