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
from typing import Any

from egraph_ir.egraph import PCall, PGet, PVar
from egraph_ir.egraph.pattern import walk
from egraph_ir.errors import RuleError, Span

from .guard_reader import read_guard
from .lexer import NAME, Line, source_lines
from .pattern_reader import PatternReader
from .rule import Rule


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
