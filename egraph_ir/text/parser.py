"""Parse the text format back into an IRModule (see printer.py for the syntax).

Recursive descent over expressions whose nesting is bounded (the printer binds every
intermediate, so deep graphs are long flat blocks that are read in a loop). Errors are
ParseErrors that start with `line:col`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..attrs import Attrs
from ..device import VirtualDevice
from ..errors import CompilerError, did_you_mean
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
)
from ..module import IRModule
from ..registry import REGISTRY
from .lexer import MAX_NESTING, MAX_TENSOR_RANK, SUFFIX_DTYPE, Token, read_metadata, tokenize
from .printer import METADATA_MARKER
from .types_reader import TypeReader


def parse(text: str, source: str = "<text>") -> IRModule:
    """Read a module (one or more `def @name(...) {...}`) or a single expression."""
    return Parser(text, source).module()


def parse_expr(text: str, free_vars: dict[str, Var] | None = None) -> Expr:
    """Read one expression; `free_vars` names variables it may use."""
    p = Parser(text, "<expr>")
    p.scopes.append(dict(free_vars or {}))
    return p.block_until("eof")


class Parser(TypeReader):
    """The module and expression grammar over TypeReader's tokens and types."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        body, meta = text, ""
        marker = text.find(METADATA_MARKER)
        if marker >= 0:
            body, meta = text[:marker], text[marker + len(METADATA_MARKER) :]
        self.meta = read_metadata(meta, body.count("\n") + 1)
        self.meta_consts: dict[int, Constant] = {}
        self.toks = tokenize(body)
        self.i = 0
        self.scopes: list[dict[str, Expr]] = []
        self.depth = 0

    # ---------------------------------------------------------------- scopes
    def lookup(self, tok: Token) -> Expr:
        for scope in reversed(self.scopes):
            if tok.text in scope:
                return scope[tok.text]
        raise self.error(f"undefined variable {tok.text}", tok)

    def define(self, name: str, e: Expr, tok: Token) -> None:
        if name in self.scopes[-1]:
            raise self.error(f"{name} is defined twice in this block", tok)
        self.scopes[-1][name] = e

    # ---------------------------------------------------------------- module
    def module(self) -> IRModule:
        if not self.at("def"):
            e = self.block_until("eof")
            return IRModule.from_expr(e)
        funcs: dict[str, Function] = {}
        while self.accept("def"):
            name_tok = self.take("global", "a function name like @main")
            name = name_tok.text[1:]
            if name in funcs:
                raise self.error(f"function @{name} is defined twice", name_tok)
            funcs[name] = self.function_rest()
        if self.tok.kind != "eof":
            raise self.error(f"expected 'def' or end of input, found '{self.tok.text}'")
        return IRModule(funcs)

    def function_rest(self) -> Function:
        """`(params) [-> type] { block }` after `def @name` or `fn`."""
        start = self.tok
        self.expect("(")
        self.scopes.append({})
        params: list[Var] = []
        attrs: dict[str, Any] = {}
        while not self.at(")"):
            if self.tok.kind == "local":
                tok = self.take("local", "a parameter")
                ann = self.type_() if self.accept(":") else None
                v = Var(tok.text[1:], ann, self.span(tok))
                self.define(tok.text, v, tok)
                params.append(v)
            else:
                key = self.take("ident", "a parameter or an attribute").text
                self.expect("=")
                attrs[key] = self.attr_value()
            if not self.accept(","):
                break
        self.expect(")")
        ret = self.type_() if self.accept("->") else None
        self.expect("{")
        body = self.block_until("}")
        self.expect("}")
        self.scopes.pop()
        return Function(tuple(params), body, ret, Attrs(attrs), self.span(start))

    def block_until(self, end: str) -> Expr:
        """Statements `%n = e;` and `let %x = e;`, then the result expression."""
        self.scopes.append({})
        lets: list[tuple[Var, Expr, Token]] = []
        while True:
            if self.accept("let"):
                tok = self.take("local", "a variable after 'let'")
                ann = self.type_() if self.accept(":") else None
                self.expect("=")
                value = self.expr()
                self.expect(";")
                v = Var(tok.text[1:], ann, self.span(tok))
                self.scopes[-1][tok.text] = v  # a later let may shadow an earlier one
                lets.append((v, value, tok))
            elif self.tok.kind == "local" and self.toks[self.i + 1].text == "=":
                tok = self.take("local", "a name")
                self.i += 1
                value = self.expr()
                self.expect(";")
                self.define(tok.text, value, tok)
            else:
                break
        result = self.expr()
        if end == "eof" and self.tok.kind != "eof":
            raise self.error(f"expected end of input, found '{self.tok.text}'")
        if end != "eof" and not self.at(end):
            raise self.error(f"expected '{end}' or ';', found '{self.tok.text or 'end of input'}'")
        for v, value, tok in reversed(lets):
            result = Let(v, value, result, self.span(tok))
        self.scopes.pop()
        return result

    # ---------------------------------------------------------------- expressions
    def expr(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(
                f"expression nested deeper than {MAX_NESTING} levels; "
                "bind intermediates with '%n = ...;'"
            )
        try:
            e = self.primary()
            while True:
                if self.at("."):
                    self.i += 1
                    tok = self.take("number", "a tuple index")
                    for part in tok.text.split("."):
                        if not part.isdigit():
                            raise self.error("tuple index must be a non-negative integer", tok)
                        e = TupleGetItem(e, int(part), self.span(tok))
                elif self.at("("):
                    start = self.tok
                    args, attrs = self.call_args()
                    e = Call(e, tuple(args), Attrs(attrs), self.span(start))  # type: ignore[arg-type]
                else:
                    return e
        finally:
            self.depth -= 1

    def primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "local":
            self.i += 1
            return self.lookup(tok)
        if tok.kind == "global":
            self.i += 1
            return GlobalVar(tok.text[1:])
        if tok.kind == "number" or tok.text in ("true", "false"):
            return Constant(self.scalar(), self.span(tok))
        if self.at("["):
            return Constant(self.tensor_literal(), self.span(tok))
        if self.at("("):
            return self.paren()
        if self.at("{"):
            self.i += 1
            e = self.block_until("}")
            self.expect("}")
            return e
        if self.accept("fn"):
            return self.function_rest()
        if self.accept("if"):
            self.expect("(")
            cond = self.expr()
            self.expect(")")
            self.expect("{")
            then = self.block_until("}")
            self.expect("}")
            self.expect("else")
            self.expect("{")
            other = self.block_until("}")
            self.expect("}")
            return If(cond, then, other, self.span(tok))
        if tok.kind == "ident" and tok.text == "meta":
            return self.meta_ref()
        if tok.kind == "ident":
            return self.op_call()
        raise self.error(f"expected an expression, found '{tok.text or 'end of input'}'")

    def paren(self) -> Expr:
        start = self.expect("(")
        items: list[Expr] = []
        trailing_comma = False
        while not self.at(")"):
            items.append(self.expr())
            trailing_comma = self.accept(",")
            if not trailing_comma:
                break
        self.expect(")")
        if len(items) == 1 and not trailing_comma:
            return items[0]
        return Tuple(tuple(items), self.span(start))

    def op_call(self) -> Expr:
        tok = self.take("ident", "an op name")
        if tok.text not in REGISTRY:
            raise self.error(f"unknown op '{tok.text}'{did_you_mean(tok.text, REGISTRY)}", tok)
        if not self.at("("):
            raise self.error(f"expected '(' after op '{tok.text}'")
        args, attrs = self.call_args()
        try:
            return Call(REGISTRY[tok.text], tuple(args), Attrs(attrs), self.span(tok))
        except CompilerError as exc:
            raise self.error(str(exc), tok) from None

    def call_args(self) -> tuple[list[Expr], dict[str, Any]]:
        self.expect("(")
        args: list[Expr] = []
        attrs: dict[str, Any] = {}
        while not self.at(")"):
            if self.tok.kind == "ident" and self.toks[self.i + 1].text == "=":
                key = self.take("ident", "an attribute").text
                self.i += 1
                if key in attrs:
                    raise self.error(f"attribute '{key}' given twice")
                attrs[key] = self.attr_value()
            else:
                if attrs:
                    raise self.error("positional argument after attributes")
                args.append(self.expr())
            if not self.accept(","):
                break
        self.expect(")")
        return args, attrs

    def meta_ref(self) -> Constant:
        tok = self.take("ident", "meta")
        self.expect("[")
        if self.take("ident", "'Constant'").text != "Constant":
            raise self.error("only meta[Constant][k] is supported", tok)
        self.expect("]")
        self.expect("[")
        idx_tok = self.take("number", "a constant index")
        self.expect("]")
        k = int(idx_tok.text) if idx_tok.text.isdigit() else -1
        if not 0 <= k < len(self.meta):
            hint = "; the text has no metadata section" if not self.meta else ""
            raise self.error(f"meta[Constant][{idx_tok.text}] is not defined{hint}", tok)
        if k not in self.meta_consts:
            self.meta_consts[k] = Constant(self.meta[k], self.span(tok))
        return self.meta_consts[k]

    # ---------------------------------------------------------------- literals
    def scalar(self, default_float: str = "float32", default_int: str = "int32") -> np.ndarray:
        tok = self.tok
        self.i += 1
        if tok.text in ("true", "false"):
            return np.asarray(tok.text == "true")
        special = re.fullmatch(r"([+-]?(?:inf|nan))(f16|f32|f64|f)?", tok.text)  # not "in" + f
        m = special or re.fullmatch(r"(.*?)(f16|f32|f64|f|i8|i16|i32|i64|u8)?", tok.text)
        assert m is not None
        num, suffix = m.group(1), m.group(2)
        is_float = any(c in num for c in ".eE") or num.lstrip("+-") in ("inf", "nan")
        dtype = SUFFIX_DTYPE[suffix] if suffix else (default_float if is_float else default_int)
        try:
            if dtype.startswith("float"):
                return np.asarray(float(num), dtype=dtype)
            if is_float:
                raise ValueError
            value = int(num)
            info = np.iinfo(dtype)
            if not info.min <= value <= info.max:
                raise ValueError
            return np.asarray(value, dtype=dtype)
        except ValueError:
            raise self.error(f"'{tok.text}' is not a valid {dtype} literal", tok) from None

    def tensor_literal(self) -> np.ndarray:
        """Nested lists of scalars, e.g. [[1f, 2f], [3f, 4f]] (rectangular, one dtype)."""
        start = self.tok
        values: list[np.ndarray] = []
        shape: list[int] = []
        counts: list[int] = []
        depth = 0
        pending_shape: dict[int, int] = {}
        while True:
            if self.accept("["):
                counts.append(0)
                depth += 1
                if depth > MAX_TENSOR_RANK:
                    raise self.error(
                        f"tensor literal nested deeper than {MAX_TENSOR_RANK} levels", start
                    )
                if depth > len(shape):
                    shape.append(-1)
                continue
            if self.at("]"):
                self.i += 1
                n = counts.pop()
                level = depth - 1
                if pending_shape.setdefault(level, n) != n:
                    raise self.error("tensor literal is not rectangular", start)
                depth -= 1
                if counts:
                    counts[-1] += 1
                if depth == 0:
                    break
                self.accept(",")
                continue
            if depth != len(shape):
                raise self.error("tensor literal mixes scalars and lists", start)
            values.append(self.scalar())
            counts[-1] += 1
            self.accept(",")
        dtypes = {str(v.dtype) for v in values}
        if len(dtypes) != 1:
            raise self.error("tensor literal needs at least one element and one dtype", start)
        dims = tuple(pending_shape[i] for i in range(len(pending_shape)))
        return np.array(values, dtype=dtypes.pop()).reshape(dims)

    def attr_value(self) -> Any:
        tok = self.tok
        if tok.kind == "number":
            num = self.scalar("float64", "int64")
            return num.item()
        if tok.kind == "string":
            self.i += 1
            try:
                return bytes(tok.text[1:-1], "utf-8").decode("unicode_escape")
            except UnicodeDecodeError as exc:
                raise self.error(f"bad escape in string ({exc.reason})", tok) from None
        if self.at("[") or self.at("("):
            close = "]" if self.tok.text == "[" else ")"
            self.i += 1
            items = []
            with self.nested("attribute list"):
                while not self.at(close):
                    items.append(self.attr_value())
                    if not self.accept(","):
                        break
            self.expect(close)
            return tuple(items)
        if tok.kind == "ident" and tok.text == "VirtualDevice":
            return self.virtual_device()
        if tok.kind == "ident" and tok.text == "dim" and self.toks[self.i + 1].text == "(":
            self.i += 2  # dim(seq + 1): a size expression
            value = self.dim()
            self.expect(")")
            return value
        if tok.kind == "ident":
            self.i += 1
            return {"True": True, "False": False, "None": None, "true": True, "false": False}.get(
                tok.text, tok.text
            )
        raise self.error(f"expected an attribute value, found '{tok.text or 'end of input'}'")

    def virtual_device(self) -> VirtualDevice:
        """`VirtualDevice("cpu"[, id][, target="..."][, memory_scope="..."])`."""
        start = self.expect("VirtualDevice")
        self.expect("(")
        fields: dict[str, Any] = {}
        positional = ("device_type", "device_id")
        while not self.at(")"):
            if self.tok.kind == "ident" and self.toks[self.i + 1].text == "=":
                key = self.take("ident", "a field").text
                self.expect("=")
            elif len(fields) < len(positional):
                key = positional[len(fields)]
            else:
                raise self.error("VirtualDevice takes at most two positional fields")
            fields[key] = self.attr_value()
            if not self.accept(","):
                break
        self.expect(")")
        try:
            return VirtualDevice(**fields)
        except TypeError as exc:
            raise self.error(f"bad VirtualDevice: {exc}", start) from None
        except CompilerError as exc:
            raise self.error(str(exc), start) from None
