"""Pattern tables as data: which groups of ops become one composite call (MergeComposite).

    # file order is priority: earlier patterns win where matches overlap
    pattern blas.dense
        relu?(add?(dense(?x, ?w), ?b))
        where shape(?b) == [dim(?w, 0)]

A `pattern NAME` entry holds one pattern in the rule syntax (no right-hand side) and optional
`where` guards. The target is NAME's prefix before the first `.`. `op?(x, ...)` makes an op
optional: it matches `op(x, ...)` or else its first argument alone, so one entry covers a
product with or without its bias and activation. `.0` projects a tuple field; an attribute
left out matches any value. A guard over a variable that an absent optional part would have
bound does not apply. Python tables work too: `(name, pattern)` or `(name, pattern, check)`
where the pattern is a string in this syntax (or a parsed pattern) and `check(root_call)`
sees the matched root call, typed, and may refuse the match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from egraph_ir.egraph import AttrVar, Match, PCall, PGet, PLit, PVar
from egraph_ir.egraph.pattern import Pattern, POpt
from egraph_ir.errors import RuleError, Span
from egraph_ir.expr import Call, Constant, Expr, TupleGetItem
from egraph_ir.registry import Op

from .guard_reader import read_guard
from .guards import GuardExpr, normalise_value
from .lexer import NAME, Line, read_source, source_lines
from .pattern_reader import PatternReader

Check = Callable[[Call], bool]
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


@dataclass(frozen=True)
class CompositePattern:
    """One entry of a pattern table."""

    name: str
    pattern: Pattern
    guards: tuple[GuardExpr, ...] = ()
    check: Check | None = None
    span: Span | None = None

    @property
    def target(self) -> str:
        return self.name.split(".", 1)[0]

    def match(self, expr: Expr) -> CompositeMatch | None:
        """The match rooted at `expr` when the pattern, its guards and check accept it."""
        found = match_pattern(self.pattern, expr)
        if found is None:
            return None
        m = found.as_guard_match()
        for g in self.guards:
            try:
                ok = g(m)
            except KeyError:  # a variable of an absent optional part: the guard does not apply
                continue
            if not ok:
                return None
        if self.check is not None and isinstance(expr, Call) and not self.check(expr):
            return None
        return found


@dataclass
class CompositeMatch:
    """What a pattern matched: the root, the matched nodes (inputs before users) and the
    bindings of its variables."""

    root: Expr
    nodes: list[Expr] = field(default_factory=list)
    tensors: dict[str, Expr] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> CompositeMatch:
        return CompositeMatch(self.root, list(self.nodes), dict(self.tensors), dict(self.attrs))

    def as_guard_match(self) -> Match:
        types = {k: e.checked_type for k, e in self.tensors.items()}
        consts = {k: e.data for k, e in self.tensors.items() if isinstance(e, Constant)}
        return Match(types, self.attrs, consts)


def match_pattern(p: Pattern, expr: Expr) -> CompositeMatch | None:
    """Match `p` against the IR rooted at `expr` (patterns are at most 64 deep)."""
    state = CompositeMatch(expr)
    return state if _match(p, expr, state) else None


def _match(p: Pattern, e: Expr, st: CompositeMatch) -> bool:
    if isinstance(p, PVar):
        bound = st.tensors.setdefault(p.name, e)
        return bound is e
    if isinstance(p, PLit):
        return isinstance(e, Constant) and e.data.size > 0 and bool(np.all(e.data == p.value))
    if isinstance(p, PGet):
        if not isinstance(e, TupleGetItem) or e.index != p.index:
            return False
        if not _match(p.tuple_value, e.tuple_value, st):
            return False
        st.nodes.append(e)
        return True
    if isinstance(p, POpt):
        trial = st.copy()
        if _match(p.call, e, trial):
            st.nodes, st.tensors, st.attrs = trial.nodes, trial.tensors, trial.attrs
            return True
        return _match(p.call.args[0], e, st)
    assert isinstance(p, PCall)
    if not isinstance(e, Call) or not isinstance(e.op, Op) or e.op.name != p.op:
        return False
    if len(e.args) != len(p.args):
        return False
    for name, want in p.attrs:
        have = e.attrs.get(name)
        if isinstance(want, AttrVar):
            if st.attrs.setdefault(want.name, have) != have:
                return False
        elif normalise_value(want) != normalise_value(have):
            return False
    for sub, arg in zip(p.args, e.args, strict=True):
        if not _match(sub, arg, st):
            return False
    st.nodes.append(e)
    return True


# ---------------------------------------------------------------- reading tables
def parse_patterns(text: str, source: str = "<patterns>") -> list[CompositePattern]:
    """Read a pattern table; errors name file:line:col."""
    entries: list[CompositePattern] = []
    names: dict[str, int] = {}
    current: dict[str, Any] | None = None

    def finish() -> None:
        if current is None:
            return
        if current["pattern"] is None:
            raise RuleError(f"{source}:{current['line']}:1: pattern '{current['name']}' is empty")
        entries.append(
            CompositePattern(
                current["name"],
                current["pattern"],
                tuple(current["guards"]),
                span=Span(source, current["line"], 1),
            )
        )

    for lineno, indent, body in source_lines(text):
        if body.startswith("pattern ") or body == "pattern":
            finish()
            m = re.fullmatch(r"pattern\s+(\S+)", body)
            if not m or not NAME.match(m.group(1)):
                raise RuleError(f"{source}:{lineno}:{indent + 1}: expected 'pattern NAME'")
            name = m.group(1)
            if name in names:
                raise RuleError(
                    f"{source}:{lineno}:{indent + 9}: duplicate pattern name '{name}' (first "
                    f"defined on line {names[name]})"
                )
            names[name] = lineno
            current = {"name": name, "line": lineno, "pattern": None, "guards": [], "kinds": {}}
            continue
        if current is None:
            hint = (
                " (rule files hold rules; pattern tables hold patterns)"
                if body.startswith("rule")
                else ""
            )
            raise RuleError(f"{source}:{lineno}:{indent + 1}: expected 'pattern NAME'{hint}")
        if body.startswith("where ") or body == "where":
            if current["pattern"] is None:
                raise RuleError(f"{source}:{lineno}:{indent + 1}: 'where' before the pattern")
            current["guards"].append(read_guard(body, source, lineno, indent, current["kinds"]))
            continue
        if current["pattern"] is not None:
            raise RuleError(
                f"{source}:{lineno}:{indent + 1}: pattern '{current['name']}' already has its "
                "pattern line; add 'where' guards or start a new 'pattern NAME'"
            )
        current["pattern"] = _pattern_line(Line(body, source, lineno, indent + 1), current["kinds"])
    finish()
    return entries


def _pattern_line(line: Line, kinds: dict[str, str]) -> Pattern:
    if any(t.kind == "arrow" for t in line.toks):
        arrow = next(t for t in line.toks if t.kind == "arrow")
        raise line.error("a pattern has no right-hand side: remove '=>' and what follows", arrow)
    p = PatternReader(line, kinds, "lhs", optional=True).pattern()
    if not isinstance(p, PCall | PGet | POpt):
        raise line.error("a pattern must be an op call", line.toks[0])
    line.done()
    return p


def parse_pattern(text: str, source: str = "<pattern>") -> tuple[Pattern, dict[str, str]]:
    """One pattern written in the rule syntax; also its variables' kinds."""
    kinds: dict[str, str] = {}
    return _pattern_line(Line(text, source, 1), kinds), kinds


def load_patterns(path: str | Path) -> list[CompositePattern]:
    """Read a pattern table file (see the module docstring)."""
    return parse_patterns(read_source(path, "pattern file"), str(Path(path)))


def builtin_patterns(name: str) -> list[CompositePattern]:
    """A shipped pattern table (rules/builtin/<name>.patterns)."""
    path = BUILTIN_DIR / f"{name}.patterns"
    if not path.exists():
        known = sorted(f.stem for f in BUILTIN_DIR.glob("*.patterns"))
        raise RuleError(f"no built-in pattern table '{name}'; known: {', '.join(known)}")
    return load_patterns(path)


def pattern_table(entries: Iterable[Any]) -> list[CompositePattern]:
    """Normalise a table: CompositePattern entries, or `(name, pattern[, check])` tuples with
    the pattern as text in the rule syntax or as a parsed pattern."""
    table: list[CompositePattern] = []
    seen: set[str] = set()
    for k, entry in enumerate(entries):
        if isinstance(entry, CompositePattern):
            item = entry
        elif isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) in (2, 3):
            name, pattern = entry[0], entry[1]
            check = entry[2] if len(entry) == 3 else None
            if not isinstance(name, str) or not NAME.match(name):
                raise RuleError(f"pattern table entry {k}: bad name {name!r}")
            if check is not None and not callable(check):
                raise RuleError(f"pattern table entry {k} ({name}): check is not callable")
            if isinstance(pattern, str):
                pattern, _ = parse_pattern(pattern, f"<pattern {name}>")
            elif not isinstance(pattern, PCall | PGet | POpt):
                raise RuleError(
                    f"pattern table entry {k} ({name}): the pattern must be text or an op pattern"
                )
            item = CompositePattern(name, pattern, check=check)
        else:
            raise RuleError(
                f"pattern table entry {k}: expected (name, pattern) or (name, pattern, check), "
                f"got {entry!r}"
            )
        if item.name in seen:
            raise RuleError(f"pattern table: duplicate name '{item.name}'")
        seen.add(item.name)
        table.append(item)
    return table
