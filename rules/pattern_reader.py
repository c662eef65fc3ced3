"""Patterns of rules and pattern tables, read against the op registry: op calls with
attributes, `?x` variables, tuple fields and literals."""

from __future__ import annotations

from typing import Any

from egraph_ir.egraph import AttrVar, PCall, PGet, PLit, PVar
from egraph_ir.egraph.pattern import AttrExpr, Pattern, POpt, computed
from egraph_ir.errors import AttrError, did_you_mean
from egraph_ir.registry import REGISTRY

from .guard_reader import GuardReader
from .guards import CONSTANT_NAMES
from .lexer import MAX_NESTING, SCALAR_ATTR_KINDS, Line, Tok, number


class PatternReader:
    """Parses one side of a rewrite; records variable kinds and checks ops and attributes."""

    def __init__(
        self,
        line: Line,
        kinds: dict[str, str],
        side: str,
        optional: bool = False,
        attr_kinds: dict[str, str] | None = None,
    ) -> None:
        self.line, self.kinds, self.side = line, kinds, side
        self.attr_kinds = attr_kinds if attr_kinds is not None else {}  # attr var -> its kind
        self.optional = optional  # `op?(...)` allowed (pattern tables)
        self.depth = 0  # of attribute lists

    def pattern(self, depth: int = 0) -> Pattern:
        if depth > 64:
            raise self.line.error("pattern nested too deeply")
        tok = self.line.next()
        p: Pattern
        if tok.kind == "var":
            p = self._tensor_var(tok)
        elif tok.kind == "number":
            p = PLit(float(number(tok.text)))
        elif tok.kind == "ident" and self.line.at("?"):
            mark = self.line.next()
            if not self.optional:
                raise self.line.error(
                    f"'{tok.text}?' (an optional op) belongs in pattern tables, not in rules",
                    mark,
                )
            call = self._call(tok, depth)
            if not call.args:
                raise self.line.error(f"optional '{tok.text}?' needs an input to fall back to", tok)
            p = POpt(call)
        elif tok.kind == "ident":
            p = self._call(tok, depth)
        else:
            raise self.line.error(f"expected a pattern, found '{tok.text}'", tok)
        while self.line.at("."):
            self.line.next()
            idx = self.line.next()
            if idx.kind != "number" or not idx.text.isdigit():
                raise self.line.error("expected a tuple index after '.'", idx)
            if int(idx.text) >= 1 << 16:
                raise self.line.error(f"tuple index {idx.text} is out of range", idx)
            p = PGet(p, int(idx.text))
        return p

    def _bind(self, tok: Tok, kind: str) -> str:
        name = tok.text[1:]
        known = self.kinds.get(name)
        if self.side == "lhs":
            if known is not None and known != kind:
                raise self.line.error(
                    f"{tok.text} is used both as a tensor and as an attribute", tok
                )
            self.kinds[name] = kind
        elif known is None:
            raise self.line.error(f"{tok.text} is not bound on the left-hand side", tok)
        elif kind == "attr" and known != "attr":
            raise self.line.error(f"{tok.text} is a tensor, not an attribute value", tok)
        return name

    def _tensor_var(self, tok: Tok) -> PVar:
        if self.side == "rhs" and self.kinds.get(tok.text[1:]) == "attr":
            kind = self.attr_kinds.get(tok.text[1:], "int")
            if kind not in SCALAR_ATTR_KINDS:
                raise self.line.error(
                    f"{tok.text} is bound to an attribute that need not be a number "
                    f"({kind}); only int, float or bool attributes can be used as a "
                    "scalar constant",
                    tok,
                )
            return PVar(tok.text[1:])  # an attribute value used as a scalar constant
        return PVar(self._bind(tok, "tensor"))

    def _call(self, tok: Tok, depth: int) -> PCall:
        op = REGISTRY.get(tok.text)
        if op is None:
            raise self.line.error(f"unknown op '{tok.text}'{did_you_mean(tok.text, REGISTRY)}", tok)
        self.line.expect("(")
        args: list[Pattern] = []
        attrs: list[tuple[str, Any]] = []
        while not self.line.at(")"):
            cur = self.line.tok
            nxt = self.line.toks[self.line.i + 1] if self.line.i + 1 < len(self.line.toks) else None
            if cur is not None and cur.kind == "ident" and nxt is not None and nxt.text == "=":
                key_tok = self.line.next()
                self.line.next()
                spec = op.attr_spec(key_tok.text)
                if spec is None:
                    known = ", ".join(a.name for a in op.attrs) or "none"
                    raise self.line.error(
                        f"{op.name} has no attribute '{key_tok.text}'"
                        f"{did_you_mean(key_tok.text, [a.name for a in op.attrs])}; known: {known}",
                        key_tok,
                    )
                if any(k == key_tok.text for k, _ in attrs):
                    raise self.line.error(f"attribute '{key_tok.text}' given twice", key_tok)
                value_tok = self.line.tok
                value = self._attr_value(spec.kind)
                if not isinstance(value, AttrVar) and not computed(value):
                    try:
                        value = spec.check(op.name, value)
                    except AttrError as exc:
                        raise self.line.error(str(exc), value_tok) from None
                attrs.append((key_tok.text, value))
            else:
                if attrs:
                    raise self.line.error("tensor argument after attributes")
                args.append(self.pattern(depth + 1))
            if not self.line.at(")"):
                self.line.expect(",")
        self.line.expect(")")
        if op.variadic:
            if not args:
                raise self.line.error(f"{op.name} needs at least one input", tok)
        elif len(args) != len(op.inputs):
            raise self.line.error(
                f"{op.name} takes {len(op.inputs)} input(s) ({', '.join(op.inputs)}), "
                f"got {len(args)}",
                tok,
            )
        return PCall(op.name, tuple(args), tuple(attrs))

    def _attr_value(self, kind: str = "int") -> Any:
        """An attribute value; `kind` is the attribute's (or a list element's) kind."""
        tok = self.line.next()
        if tok.kind == "var":
            name = self._bind(tok, "attr")
            if self.side == "lhs":
                self.attr_kinds.setdefault(name, kind)
            return AttrVar(name)
        if tok.kind == "number":
            return number(tok.text)
        if tok.kind == "string":
            return tok.text[1:-1]
        if tok.kind == "ident" and self.line.at("("):
            return self._computed(tok)
        if tok.kind == "ident":
            return CONSTANT_NAMES.get(tok.text, tok.text)
        if tok.text in ("[", "("):
            close = "]" if tok.text == "[" else ")"
            items = []
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.line.error(f"list nested deeper than {MAX_NESTING} levels", tok)
            while not self.line.at(close):
                items.append(self._attr_value())  # list elements: ints (axes, shapes)
                if not self.line.at(close):
                    self.line.expect(",")
            self.line.expect(close)
            self.depth -= 1
            return tuple(items)
        raise self.line.error(f"expected an attribute value, found '{tok.text}'", tok)

    def _computed(self, tok: Tok) -> AttrExpr:
        """A right-hand side's attribute value computed by a guard-language call
        (`div(dim(?x, 2), 16)`), checked now and evaluated when the rule applies."""
        if self.side == "lhs":
            raise self.line.error(
                f"'{tok.text}(...)' computes a value: only a right-hand side's attributes "
                "can be computed (match the left with ?var and compare in a where line)",
                tok,
            )
        start = self.line.i - 1
        reader = GuardReader(self.line, self.kinds)
        evaluate = reader.call(tok)
        if reader.kind not in ("number", "tuple", "any"):
            raise self.line.error(f"{tok.text}() gives a {reader.kind}, not a number", tok)
        text = "".join(t.text + " " * (t.text == ",") for t in self.line.toks[start : self.line.i])
        return AttrExpr(text, evaluate)


# ---------------------------------------------------------------- guards
