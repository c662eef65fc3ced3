"""Print IR as Relay-like text that `parse` reads back exactly.

Every non-trivial dataflow node becomes a numbered binding `%n = ...;` (so deep graphs print
as flat lines), except the final expression of a block. Scalars and tiny tensors print
inline; larger constants print as `meta[Constant][k]` with their values, base64-encoded, in a
`#[metadata]` section at the end.
"""

from __future__ import annotations

import base64
import json
import re
from collections import ChainMap
from typing import Any

import numpy as np

from ..device import VirtualDevice
from ..dims import Dim
from ..expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    operands,
    set_printer,
)
from ..registry import Op

INLINE_MAX_ELEMENTS = 8
METADATA_MARKER = "#[metadata]"
SUFFIX = {
    "float32": "f",
    "float64": "f64",
    "float16": "f16",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
}

Scope = ChainMap  # node -> printed name


def print_module(mod: Any, show_meta: bool = True) -> str:
    p = _Printer()
    parts = [p.function(fn, f"def @{name}") for name, fn in mod.items()]
    return p.finish("\n\n".join(parts), show_meta)


def print_expr(expr: Expr, show_meta: bool = True) -> str:
    p = _Printer()
    lines = p.block(expr, ChainMap())
    return p.finish("\n".join(lines), show_meta)


def scalar_text(value: Any, dtype: str) -> str:
    if dtype == "bool":
        return "true" if value else "false"
    return f"{np.dtype(dtype).type(value)}{SUFFIX[dtype]}"


def attr_text(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(attr_text(x) for x in v) + "]"
    if isinstance(v, VirtualDevice):
        return v.text()
    if isinstance(v, Dim):
        return f"dim({v})"
    raise TypeError(f"cannot print attribute value {v!r}")


def _indent(text: str) -> str:
    return "\n".join("  " + line if line else line for line in text.split("\n"))


class _Printer:
    def __init__(self) -> None:
        self.names: dict[Var, str] = {}
        self.used: set[str] = set()
        self.next_suffix: dict[str, int] = {}  # base name -> the last suffix given
        self.meta: list[np.ndarray] = []
        self.meta_index: dict[int, int] = {}
        self.counter = 0

    def finish(self, text: str, show_meta: bool) -> str:
        if not self.meta:
            return text
        if not show_meta:
            return text + f"\n// metadata omitted: {len(self.meta)} constant(s)"
        rows = [METADATA_MARKER]
        for i, arr in enumerate(self.meta):
            data = base64.b64encode(
                np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
            ).decode()
            shape = (
                "(" + ", ".join(str(d) for d in arr.shape) + ("," if arr.ndim == 1 else "") + ")"
            )
            rows.append(f"meta[Constant][{i}] = {arr.dtype} {shape} {data}")
        return text + "\n" + "\n".join(rows)

    # ---------------------------------------------------------------- names
    def var_name(self, v: Var) -> str:
        if v not in self.names:
            base = re.sub(r"[^A-Za-z0-9_]", "_", v.name_hint) or "v"
            if base[0].isdigit():
                base = "v" + base
            # resume at the last suffix tried for this base: linear for 10,000 variables
            # sharing one name, where probing from 1 each time was quadratic
            name, k = base, self.next_suffix.get(base, 0)
            if k:
                name = f"{base}_{k}"
            while name in self.used:
                k += 1
                name = f"{base}_{k}"
            self.next_suffix[base] = k
            self.used.add(name)
            self.names[v] = "%" + name
        return self.names[v]

    def const_text(self, c: Constant) -> str:
        arr = c.data
        dtype = str(arr.dtype)
        if arr.ndim == 0:
            return scalar_text(arr.item(), dtype)
        if 0 < arr.size <= INLINE_MAX_ELEMENTS:
            return _nested([scalar_text(x, dtype) for x in arr.reshape(-1).tolist()], arr.shape)
        if id(c) not in self.meta_index:
            self.meta_index[id(c)] = len(self.meta)
            self.meta.append(arr)
        return f"meta[Constant][{self.meta_index[id(c)]}]"

    # ---------------------------------------------------------------- blocks
    def function(self, fn: Function, head: str) -> str:
        params = [
            f"{self.var_name(p)}" + (f": {p.type_annotation}" if p.type_annotation else "")
            for p in fn.params
        ]
        params += [f"{k}={attr_text(v)}" for k, v in fn.attrs.items()]
        ret = f" -> {fn.ret_type}" if fn.ret_type is not None else ""
        body = "\n".join(self.block(fn.body, ChainMap()))
        return f"{head}({', '.join(params)}){ret} {{\n{_indent(body)}\n}}"

    def block(self, expr: Expr, scope: Scope) -> list[str]:
        """Lines of a block: bindings, lets, then the result expression."""
        lines: list[str] = []
        while isinstance(expr, Let):
            value = self.bind_operands(expr.value, scope, lines)
            ann = f": {expr.var.type_annotation}" if expr.var.type_annotation else ""
            lines.append(f"let {self.var_name(expr.var)}{ann} = {value};")
            expr = expr.body
        lines.append(self.bind_operands(expr, scope, lines))
        return lines

    def bind_operands(self, root: Expr, scope: Scope, lines: list[str]) -> str:
        """Bind every non-leaf dataflow node under root (children first); return root's text."""
        if root in scope:
            return scope[root]
        stack: list[tuple[Expr, bool]] = [(root, False)]
        seen: set[int] = set()
        while stack:
            node, expanded = stack.pop()
            if expanded:
                if node is not root:
                    name = f"%{self.counter}"
                    self.counter += 1
                    lines.append(f"{name} = {self.text(node, scope)};")
                    scope[node] = name
                continue
            if id(node) in seen or node in scope or _is_leaf(node):
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(_operands(node)))
        return self.text(root, scope)

    def ref(self, e: Expr, scope: Scope) -> str:
        if e in scope:
            return scope[e]
        return self.text(e, scope)

    def text(self, e: Expr, scope: Scope) -> str:
        """The text of one node whose operands are already bound or leaves."""
        match e:
            case Var():
                return self.var_name(e)
            case GlobalVar():
                return f"@{e.name_hint}"
            case Constant():
                return self.const_text(e)
            case Call():
                if isinstance(e.op, Op):
                    callee = e.op.name
                    attrs = [
                        f"{a.name}={attr_text(e.attrs[a.name])}"
                        for a in e.op.attrs
                        if not _is_default(e.attrs[a.name], a.default)
                    ]
                else:
                    callee = self.ref(e.op, scope)
                    if callee.startswith("fn"):
                        callee = f"({callee})"
                    attrs = [f"{k}={attr_text(v)}" for k, v in e.attrs.items()]
                args = [self.ref(a, scope) for a in e.args]
                return f"{callee}({', '.join(args + attrs)})"
            case Tuple():
                inner = ", ".join(self.ref(f, scope) for f in e.fields)
                return f"({inner},)" if len(e.fields) == 1 else f"({inner})"
            case TupleGetItem():
                return f"{self.ref(e.tuple_value, scope)}.{e.index}"
            case Function():
                return self.function(e, "fn ")
            case If():
                cond = self.ref(e.cond, scope)
                then = "\n".join(self.block(e.true_branch, scope.new_child()))
                other = "\n".join(self.block(e.false_branch, scope.new_child()))
                return f"if ({cond}) {{\n{_indent(then)}\n}} else {{\n{_indent(other)}\n}}"
            case Let():
                inner = "\n".join(self.block(e, scope.new_child()))
                return f"{{\n{_indent(inner)}\n}}"
        raise TypeError(f"cannot print {type(e).__name__}")


def _is_default(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


def _is_leaf(e: Expr) -> bool:
    return isinstance(e, Var | GlobalVar | Constant)


def _operands(e: Expr) -> tuple[Expr, ...]:
    """Children printed in the same block (branches and bodies open blocks of their own)."""
    return (e.cond,) if isinstance(e, If) else operands(e)


def _nested(items: list[str], shape: tuple[int, ...]) -> str:
    """Nest a flat row-major list of texts into [[...], [...]] for the given shape."""
    level = items
    for dim in reversed(shape):
        level = ["[" + ", ".join(level[i : i + dim]) + "]" for i in range(0, len(level), dim)]
    return level[0]


set_printer(print_expr)  # str(expr) prints the text format
