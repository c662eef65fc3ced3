"""Read rule text into validated Rules; every error names `file:line:col`.

    # a comment
    rule double-negative [algebraic]
        negative(negative(?x)) => ?x

    rule transpose-transpose [layout]
        transpose(transpose(?x, axes=?p), axes=?q) => ?x
        where compose(?p, ?q) == identity

Patterns use the registry's op and attribute names; `?x` in a tensor position is a tensor
variable, in an attribute position (`axes=?p`) an attribute variable; `.0` takes a tuple
field; a number on the left matches a constant whose elements all equal it, on the right it
is a scalar constant of the result's dtype (an attribute variable may be used the same way).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from egraph_ir.egraph import AttrVar, PCall, PGet, PLit, PVar
from egraph_ir.egraph.pattern import Pattern, POpt, walk
from egraph_ir.errors import AttrError, RuleError, Span, did_you_mean
from egraph_ir.registry import REGISTRY
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
from .rule import Rule

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<arrow><=>|=>)
      | (?P<wrongarrow>->|<->|-->|==>|<==>)
      | (?P<cmp>==|!=|<=|>=|<|>)
      | (?P<var>\?[A-Za-z_]\w*)
      | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf|nan)
          (?:f16|f32|f64|f|i8|i16|i32|i64|u8)?(?![\w.]))
      | (?P<string>"[^"\n]*")
      | (?P<ident>[A-Za-z_][\w-]*)
      | (?P<punct>[()\[\],=.?])
      | (?P<bad>.)""",
    re.VERBOSE,
)
SUFFIX = re.compile(r"(f16|f32|f64|f|i8|i16|i32|i64|u8)$")


def number(text: str) -> int | float:
    """A numeric literal; a dtype suffix as in the IR text (1f, 0.5f, 2i64) is accepted and
    only its value counts: a pattern's literal takes the dtype of what it matches or makes."""
    suffix = SUFFIX.search(text) if not text.endswith("inf") else None
    body = text[: suffix.start()] if suffix else text
    is_float = any(c in body for c in ".eEin") or (suffix is not None and suffix.group(1)[0] == "f")
    return float(body) if is_float else int(body)


SCALAR_ATTR_KINDS = ("int", "float", "bool")
MAX_NESTING = 64  # lists in attributes and guards; keeps recursive descent shallow
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str
    col: int


class Line:
    """Tokens of one line with error reporting at file:line:col."""

    def __init__(self, text: str, source: str, line: int, first_col: int = 1) -> None:
        self.source, self.line = source, line
        self.toks: list[Tok] = []
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup or "bad"
            if kind == "ws":
                continue
            tok = Tok(kind, m.group(), first_col + m.start())
            if kind == "bad":
                raise self.error(f"unexpected character {m.group()!r}", tok)
            if kind == "wrongarrow":
                raise self.error(
                    f"'{m.group()}' is not an arrow here: write '=>' (left to right) or "
                    "'<=>' (both directions)",
                    tok,
                )
            self.toks.append(tok)
        self.end_col = first_col + len(text)
        self.i = 0

    def error(self, msg: str, tok: Tok | None = None) -> RuleError:
        col = tok.col if tok else (self.tok.col if self.tok else self.end_col)
        return RuleError(f"{self.source}:{self.line}:{col}: {msg}")

    @property
    def tok(self) -> Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def at(self, text: str) -> bool:
        return self.tok is not None and self.tok.text == text

    def next(self) -> Tok:
        tok = self.tok
        if tok is None:
            raise self.error("unexpected end of line")
        self.i += 1
        return tok

    def expect(self, text: str) -> Tok:
        if not self.at(text):
            found = self.tok.text if self.tok else "end of line"
            raise self.error(f"expected '{text}', found '{found}'")
        return self.next()

    def done(self) -> None:
        if self.tok is not None:
            raise self.error(f"unexpected '{self.tok.text}'")


# ---------------------------------------------------------------- patterns
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
            raise self.line.error(
                f"unknown op '{tok.text}'{did_you_mean(tok.text, REGISTRY)}", tok
            )
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
                if not isinstance(value, AttrVar):
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


# ---------------------------------------------------------------- guards
TENSOR_FUNC_KINDS = {"shape": "tuple", "rank": "number", "dtype": "str", "size": "number",
                     "dim": "number", "is_const": "bool", "value": "any", "min": "any",
                     "max": "any"}  # fmt: skip
VALUE_FUNC_KINDS = {
    "compose": ("tuple", "tuple"),
    "inverse": ("tuple", "tuple"),
    "len": ("tuple", "number"),
}  # (argument kind, result kind); fmt: skip


def _compatible(a: str, b: str) -> bool:
    """Can values of these static kinds be compared for equality? (any: not known)"""
    return a == b or "any" in (a, b) or "none" in (a, b) or {a, b} == {"number", "bool"}


class _GuardReader:
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
        pinnable = ("shape", "rank", "dtype", "value", "min", "max")
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
            return self._call(tok)
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

    def _call(self, tok: Tok) -> Any:
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
def source_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """(line number, indent, text) of each line that is not blank or a comment; rule files
    and pattern tables share this layout."""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.split("#", 1)[0].rstrip()
        if stripped.strip():
            yield lineno, len(stripped) - len(stripped.lstrip()), stripped.strip()


def read_guard(
    body: str, source: str, lineno: int, indent: int, kinds: dict[str, str]
) -> GuardExpr:
    """A `where ...` line's guard (body starts with `where`)."""
    line = Line(body[5:], source, lineno, indent + 6)
    if not line.toks:
        raise line.error("empty guard")
    return _GuardReader(line, kinds).guard()


def read_source(path: str | Path, what: str) -> str:
    """A rule file's or pattern table's text; unreadable or non-UTF-8 files are RuleErrors."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleError(f"{p}: cannot read {what} ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise RuleError(
            f"{p}:{line}: not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from None


def parse_rules(text: str, source: str = "<rules>") -> list[Rule]:
    """Parse and validate rule text; raises RuleError naming file:line:col."""
    rules: list[Rule] = []
    names: dict[str, int] = {}
    current: dict[str, Any] | None = None

    def finish() -> None:
        if current is None:
            return
        if current.get("lhs") is None:
            raise RuleError(
                f"{source}:{current['line']}:1: rule '{current['name']}' has no 'lhs => rhs' line"
            )
        rules.append(
            Rule(
                name=current["name"],
                tags=current["tags"],
                lhs=current["lhs"],
                rhs=current["rhs"],
                bidirectional=current["bidi"],
                guards=tuple(current["guards"]),
                span=Span(source, current["line"], 1),
            )
        )

    for lineno, indent, body in source_lines(text):
        if body.startswith("rule ") or body == "rule":
            finish()
            current = _header(body, source, lineno, indent, names)
            continue
        if current is None:
            raise RuleError(f"{source}:{lineno}:{indent + 1}: expected 'rule NAME [TAGS]'")
        if body.startswith("where ") or body == "where":
            if current.get("lhs") is None:
                raise RuleError(f"{source}:{lineno}:{indent + 1}: 'where' before the rewrite line")
            current["guards"].append(read_guard(body, source, lineno, indent, current["kinds"]))
            continue
        if current.get("lhs") is not None:
            raise RuleError(
                f"{source}:{lineno}:{indent + 1}: rule '{current['name']}' already has "
                "a rewrite; start a new rule or add 'where' guards"
            )
        _rewrite(current, Line(body, source, lineno, indent + 1))
    finish()
    return rules


def _header(
    body: str, source: str, lineno: int, indent: int, names: dict[str, int]
) -> dict[str, Any]:
    m = re.fullmatch(r"rule\s+(\S+)\s*(?:\[([^\]]*)\])?\s*", body)
    if not m or not NAME.match(m.group(1)):
        raise RuleError(f"{source}:{lineno}:{indent + 1}: expected 'rule NAME [TAG, ...]'")
    name = m.group(1)
    if name in names:
        raise RuleError(
            f"{source}:{lineno}:{indent + 6}: duplicate rule name '{name}' (first "
            f"defined on line {names[name]})"
        )
    names[name] = lineno
    tags = tuple(t.strip() for t in (m.group(2) or "").split(",") if t.strip())
    for t in tags:
        if not NAME.match(t):
            raise RuleError(f"{source}:{lineno}:{indent + 1}: bad tag '{t}'")
    return {
        "name": name,
        "tags": tags,
        "line": lineno,
        "lhs": None,
        "rhs": None,
        "bidi": False,
        "guards": [],
        "kinds": {},
    }


def _rewrite(current: dict[str, Any], line: Line) -> None:
    kinds: dict[str, str] = current["kinds"]
    attr_kinds: dict[str, str] = {}
    lhs = PatternReader(line, kinds, "lhs", attr_kinds=attr_kinds).pattern()
    if not isinstance(lhs, PCall | PGet):
        raise line.error("the left-hand side must be an op call", line.toks[0])
    arrow = line.next()
    if arrow.kind != "arrow":
        raise line.error(f"expected '=>' or '<=>', found '{arrow.text}'", arrow)
    rhs = PatternReader(line, kinds, "rhs", attr_kinds=attr_kinds).pattern()
    line.done()
    if arrow.text == "<=>":
        if not isinstance(rhs, PCall | PGet):
            raise line.error("a bidirectional rule needs an op call on both sides", arrow)
        lhs_vars = {p.name for p in walk(lhs) if isinstance(p, PVar)}
        rhs_vars = {p.name for p in walk(rhs) if isinstance(p, PVar)}
        if lhs_vars - rhs_vars:
            missing = ", ".join(sorted("?" + v for v in lhs_vars - rhs_vars))
            raise line.error(
                f"'<=>' needs every variable on both sides; {missing} only on the left", arrow
            )
    current.update(lhs=lhs, rhs=rhs, bidi=arrow.text == "<=>")
