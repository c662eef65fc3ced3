"""The text format's token cursor and its type grammar: tensor types with static or
symbolic dimensions (`Tensor[(batch, seq + 1, 768), float32]`), tuple and function types.
The expression grammar (parser.py) builds on this."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..dims import DimLike, size_var
from ..errors import CompilerError, ParseError, Span, did_you_mean
from ..types import DTYPES, FuncType, TensorType, TupleType, Type
from .lexer import MAX_NESTING, Token


class TypeReader:
    """Reads tokens one at a time; `type_()` reads a type."""

    source: str
    toks: list[Token]
    i: int
    depth: int

    # ---------------------------------------------------------------- token helpers
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def error(self, msg: str, tok: Token | None = None) -> ParseError:
        t = tok or self.tok
        return ParseError(f"{t.line}:{t.col}: {msg}")

    def span(self, tok: Token) -> Span:
        return Span(self.source, tok.line, tok.col)

    def at(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind in ("punct", "arrow", "ident")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            found = self.tok.text or "end of input"
            raise self.error(f"expected '{text}', found '{found}'")
        self.i += 1
        return self.toks[self.i - 1]

    def take(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise self.error(f"expected {what}, found '{self.tok.text or 'end of input'}'")
        self.i += 1
        return self.toks[self.i - 1]

    @contextmanager
    def nested(self, what: str) -> Iterator[None]:
        """One level of recursive descent; too many is a ParseError, not a RecursionError."""
        self.depth += 1
        try:
            if self.depth > MAX_NESTING:
                raise self.error(f"{what} nested deeper than {MAX_NESTING} levels")
            yield
        finally:
            self.depth -= 1

    # ---------------------------------------------------------------- types
    def type_(self) -> Type:
        tok = self.tok
        if self.accept("Tensor"):
            self.expect("[")
            self.expect("(")
            dims: list[DimLike] = []
            while self.tok.kind in ("number", "ident") or self.at("("):
                dims.append(self.dim())
                if not self.accept(","):
                    break
            self.expect(")")
            self.expect(",")
            dtype = self.dtype()
            self.expect("]")
            return TensorType(tuple(dims), dtype)  # type: ignore[arg-type]  # Dims allowed
        if self.at("("):
            self.i += 1
            with self.nested("tuple type"):
                fields = self._types_until(")")
            return TupleType(tuple(fields))
        if self.accept("fn"):
            self.expect("(")
            with self.nested("function type"):
                params = self._types_until(")")
                self.expect("->")
                result = self.type_()
            return FuncType(tuple(params), result)
        if tok.kind == "ident" and tok.text in DTYPES:
            return TensorType((), self.dtype())
        raise self.error(f"expected a type, found '{tok.text or 'end of input'}'")

    def _types_until(self, close: str) -> list[Type]:
        """Comma-separated types up to `close`, which is taken too."""
        types: list[Type] = []
        while not self.at(close):
            types.append(self.type_())
            if not self.accept(","):
                break
        self.expect(close)
        return types

    def dim(self) -> DimLike:
        """A dimension: a non-negative integer, a size variable, or an expression of them
        with + - * and floordiv(d, n) (`seq + 1`, `batch * seq`, `floordiv(seq, 2)`)."""
        value = self._dim_term()
        while True:
            if self.accept("+"):
                value = value + self._dim_term()
            elif self.accept("-"):
                value = value - self._dim_term()
            elif self.tok.kind == "number" and self.tok.text[:1] in "+-":  # "seq +1"
                value = value + self._dim_atom()
            else:
                return value

    def _dim_term(self) -> DimLike:
        value = self._dim_atom()
        while self.accept("*"):
            value = value * self._dim_atom()
        return value

    def _dim_atom(self) -> DimLike:
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            text = tok.text.lstrip("+")
            if not text.lstrip("-").isdigit():
                raise self.error(f"dimension must be an integer, got {tok.text}", tok)
            return int(text)
        if self.accept("("):
            value = self.dim()
            self.expect(")")
            return value
        name = self.take("ident", "a dimension")
        if name.text == "floordiv" and self.accept("("):
            numerator = self.dim()
            self.expect(",")
            divisor = self._dim_atom()
            self.expect(")")
            if not isinstance(divisor, int):
                raise self.error(f"floordiv divides by a number, got {divisor}", name)
            try:
                return numerator // divisor
            except CompilerError as exc:
                raise self.error(str(exc), name) from None
        return size_var(name.text)

    def dtype(self) -> str:
        tok = self.take("ident", "a dtype")
        if tok.text not in DTYPES:
            raise self.error(f"unknown dtype '{tok.text}'{did_you_mean(tok.text, DTYPES)}", tok)
        return tok.text
