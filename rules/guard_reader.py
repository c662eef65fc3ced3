"""`where` guards: comparisons of shapes, ranks, dtypes, attribute variables and the helper
functions rules/guards.py defines, type-checked when read."""

from __future__ import annotations

from typing import Any

from egraph_ir.errors import did_you_mean
from egraph_ir.types import DTYPES

from .guards import (
    COMPARE,
    CONSTANT_NAMES,
    KINDS,
    TENSOR_ARITY,
    TENSOR_FUNCS,
    VALUE_FUNCS,
    VALUE_READERS,
    GuardExpr,
)
from .lexer import MAX_NESTING, Line, Tok, number

TENSOR_FUNC_KINDS = {"shape": "tuple", "rank": "number", "dtype": "str", "size": "number",
                     "dim": "number", "reshaped": "tuple", "is_const": "bool", "value": "any",
                     "values": "tuple", "min": "any", "max": "any", "integral": "bool"}  # fmt: skip
VALUE_FUNC_KINDS = {
    "f32_product": ("any", "any"),  # numbers, or tuples of per-channel values
    "compose": ("tuple", "tuple"),
    "inverse": ("tuple", "tuple"),
    "len": ("tuple", "number"),
    "rem": ("number", "number"),
    "div": ("number", "number"),
    "mul": ("number", "number"),
}  # (argument kind, result kind); fmt: skip


def _compatible(a: str, b: str) -> bool:
    """Can values of these static kinds be compared for equality? (any: not known)"""
    return a == b or "any" in (a, b) or "none" in (a, b) or {a, b} == {"number", "bool"}


class GuardReader:
    """Reads one guard; every expression gets a static kind (number, str, tuple, bool,
    none, or any when only a match can tell), so an ill-typed guard is refused at load
    time instead of silently never holding."""

    def __init__(self, line: Line, kinds: dict[str, str]) -> None:
        self.line, self.kinds = line, kinds
        self.depth = 0
        self.kind = "any"  # the static kind of the expression read last
        self.reads_values = False  # a value/min/max call was read

    def typed(self, what: str, tok: Tok, *allowed: str) -> None:
        if self.kind not in (*allowed, "any"):
            raise self.line.error(f"{what} needs {' or '.join(allowed)}, got a {self.kind}", tok)

    def guard(self) -> GuardExpr:
        text = " ".join(t.text for t in self.line.toks)
        target = self._target()
        first = self.line.tok
        assert first is not None
        left = self.expr()
        left_kind = self.kind
        if self.line.at("is"):
            self.typed("'is' (a dtype kind test, as in dtype(?x) is float)", first, "str")
            self.line.next()
            kind = self.line.next()
            if kind.text not in KINDS:
                raise self.line.error(
                    f"unknown dtype kind '{kind.text}'; known: {', '.join(KINDS)}", kind
                )
            allowed = KINDS[kind.text]
            self.line.done()
            pinned = ("kind", target[1]) if target and target[0] == "dtype" else None
            return GuardExpr(
                text, lambda m: left(m) in allowed, pinned, lambda m: allowed, self.reads_values
            )
        tok = self.line.tok
        if tok is not None and tok.kind == "cmp":
            self.line.next()
            right = self.expr()
            if tok.text in ("<", "<=", ">", ">="):
                self.kind, right_kind = left_kind, self.kind
                self.typed(f"'{tok.text}'", first, "number")
                self.kind = right_kind
                self.typed(f"'{tok.text}'", tok, "number")
            elif not _compatible(left_kind, self.kind):
                raise self.line.error(
                    f"'{tok.text}' compares a {left_kind} with a {self.kind}: never equal", tok
                )
            self.line.done()
            cmp = COMPARE[tok.text]
            pinned = target if tok.text == "==" else None
            if target is not None and (target[0], tok.text[0]) in (("min", ">"), ("max", "<")):
                pinned = (f"{target[0]}{tok.text[0]}", target[1])  # a bound on the values
            return GuardExpr(
                text, lambda m: cmp(left(m), right(m)), pinned, right, self.reads_values
            )
        self.kind = left_kind
        self.typed("a guard without a comparison", first, "bool")
        self.line.done()
        return GuardExpr(text, left, reads_values=self.reads_values)

    def _target(self) -> tuple[str, str] | None:
        """What the guard's left side pins, when it is `f(?x)` or an attribute variable."""
        toks = self.line.toks[self.line.i :]
        texts = [t.text for t in toks[:4]]
        pinnable = ("shape", "rank", "dtype", "value", "values", "min", "max")
        call_of_var = len(toks) >= 4 and texts[1::2] == ["(", ")"] and toks[2].kind == "var"
        if call_of_var and texts[0] in pinnable:
            return texts[0], texts[2][1:]
        if toks and toks[0].kind == "var" and self.kinds.get(toks[0].text[1:]) == "attr":
            return "attr", toks[0].text[1:]
        return None

    def expr(self) -> Any:
        tok = self.line.next()
        self.kind = "any"
        if tok.kind == "number":
            value: Any = number(tok.text)
            self.kind = "number"
            return lambda m: value
        if tok.kind == "string":
            s = tok.text[1:-1]
            self.kind = "str"
            return lambda m: s
        if tok.kind == "var":
            name = tok.text[1:]
            kind = self.kinds.get(name)
            if kind is None:
                raise self.line.error(
                    f"guard uses {tok.text}, which the left-hand side does not bind", tok
                )
            if kind == "tensor":
                raise self.line.error(
                    f"{tok.text} is a tensor: inspect it with shape(), rank(), "
                    "dtype(), size(), dim(), is_const() or value()",
                    tok,
                )
            return lambda m: m.attrs[name]
        if tok.text == "[":
            items = []
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.line.error(f"list nested deeper than {MAX_NESTING} levels", tok)
            while not self.line.at("]"):
                items.append(self.expr())
                if not self.line.at("]"):
                    self.line.expect(",")
            self.line.expect("]")
            self.depth -= 1
            self.kind = "tuple"
            return lambda m: tuple(f(m) for f in items)
        if tok.kind == "ident" and self.line.at("("):
            return self.call(tok)
        if tok.kind == "ident" and (tok.text in CONSTANT_NAMES or tok.text in DTYPES):
            value = CONSTANT_NAMES.get(tok.text, tok.text)
            if isinstance(value, bool):
                self.kind = "bool"
            elif value is None:
                self.kind = "none"
            elif isinstance(value, str):
                self.kind = "str"
            return lambda m: value
        raise self.line.error(f"unexpected '{tok.text}' in guard", tok)

    def call(self, tok: Tok) -> Any:
        """A function call; calls nest at most MAX_NESTING deep (the reader recurses)."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.line.error(f"calls nested deeper than {MAX_NESTING} levels", tok)
        try:
            return self._call_body(tok)
        finally:
            self.depth -= 1

    def _call_body(self, tok: Tok) -> Any:
        self.line.expect("(")
        name = tok.text
        if name in TENSOR_FUNCS:
            var = self.line.next()
            if var.kind != "var" or self.kinds.get(var.text[1:]) != "tensor":
                raise self.line.error(
                    f"{name}() takes a tensor variable bound on the left-hand "
                    f"side, got '{var.text}'",
                    var,
                )
            rest = []
            while self.line.at(","):
                self.line.next()
                at = self.line.tok
                rest.append(self.expr())
                assert at is not None
                if name == "reshaped":
                    self.typed("reshaped()'s new shape", at, "tuple")
                else:
                    self.typed(f"{name}()'s index", at, "number")
            self.line.expect(")")
            if 1 + len(rest) != TENSOR_ARITY[name]:
                raise self.line.error(f"{name}() takes {TENSOR_ARITY[name]} argument(s)", tok)
            self.kind = TENSOR_FUNC_KINDS[name]
            self.reads_values |= name in VALUE_READERS
            fn, x = TENSOR_FUNCS[name], var.text[1:]
            return lambda m: fn(m, x, *(r(m) for r in rest))
        if name in VALUE_FUNCS:
            arity, impl = VALUE_FUNCS[name]
            args = []
            want, result = VALUE_FUNC_KINDS.get(name, ("any", "any"))
            while not self.line.at(")"):
                at = self.line.tok
                args.append(self.expr())
                assert at is not None
                if want != "any":
                    self.typed(f"{name}()", at, want, *(("str",) if name == "len" else ()))
                if not self.line.at(")"):
                    self.line.expect(",")
            self.line.expect(")")
            if len(args) != arity:
                raise self.line.error(f"{name}() takes {arity} argument(s), got {len(args)}", tok)
            self.kind = result
            return lambda m: impl(*(a(m) for a in args))
        known = sorted([*TENSOR_FUNCS, *VALUE_FUNCS])
        raise self.line.error(
            f"unknown guard function '{name}'{did_you_mean(name, known)}; "
            f"known: {', '.join(known)}",
            tok,
        )


# ---------------------------------------------------------------- files


def read_guard(
    body: str, source: str, lineno: int, indent: int, kinds: dict[str, str]
) -> GuardExpr:
    """A `where ...` line's guard (body starts with `where`)."""
    line = Line(body[5:], source, lineno, indent + 6)
    if not line.toks:
        raise line.error("empty guard")
    return GuardReader(line, kinds).guard()
