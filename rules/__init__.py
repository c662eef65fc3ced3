"""rules: optimisation rules declared as data in `*.rules` files (layer 1; imports egraph_ir).

`load(path)` reads a user's file exactly like `builtin(name)` reads the shipped ones;
both validate every rule against the op registry and report `file:line:col`.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from typing import Any

from egraph_ir.errors import RuleError, did_you_mean, require

from .explain import Explanation, Site, explain
from .lexer import read_source
from .patterns import (
    CompositeMatch,
    CompositePattern,
    builtin_patterns,
    load_patterns,
    parse_patterns,
    pattern_table,
)
from .reader import parse_rules
from .rule import FAST_MATH, Rule, RuleSet

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


def load(path: str | Path) -> RuleSet:
    """Read and validate a rule file."""
    p = Path(path)
    return RuleSet(parse_rules(read_source(p, "rule file"), str(p)), p.stem)


def builtin_names() -> list[str]:
    return sorted(f.stem for f in BUILTIN_DIR.glob("*.rules"))


def builtin(name: str) -> RuleSet:
    """A shipped rule set by name (the file rules/builtin/<name>.rules)."""
    path = BUILTIN_DIR / f"{name}.rules"
    if not path.exists():
        raise RuleError(
            f"no built-in rule set '{name}'{did_you_mean(name, builtin_names())}; "
            f"known: {', '.join(builtin_names())}"
        )
    return RuleSet(_parsed(path, path.stat().st_mtime_ns), name)


@cache
def _parsed(path: Path, mtime_ns: int) -> tuple[Rule, ...]:
    """A built-in file's rules, read once per process (rules are immutable; every EqSat
    pass of every build asks for its sets: 18 reads, a quarter second, per ResNet-18)."""
    return tuple(load(path))


def parse(text: str, source: str = "<rules>") -> RuleSet:
    """Rules from a string (as a file would hold them)."""
    return RuleSet(parse_rules(text, source), source)


_SOUNDNESS = ("SoundnessFailure", "SoundnessReport", "check_soundness")


_PROVER = ("ProofReport", "ProofResult", "prove", "prove_rule")


def __getattr__(name: str) -> Any:
    """The soundness checker loads hypothesis (~0.1 s) and the prover z3: each imported
    on first use only (the prover asks for z3 when it runs)."""
    if name in _SOUNDNESS:
        require("hypothesis", f"rules.{name}")
        return getattr(importlib.import_module(f"{__name__}.soundness"), name)
    if name in _PROVER:
        return getattr(importlib.import_module(f"{__name__}.proofs"), name)
    raise AttributeError(f"module 'rules' has no attribute '{name}'")


__all__ = [
    "FAST_MATH",
    "CompositeMatch",
    "CompositePattern",
    "Explanation",
    "ProofReport",
    "ProofResult",
    "Rule",
    "RuleSet",
    "Site",
    "SoundnessFailure",
    "SoundnessReport",
    "builtin",
    "builtin_names",
    "builtin_patterns",
    "check_soundness",
    "explain",
    "load",
    "load_patterns",
    "parse",
    "parse_patterns",
    "pattern_table",
    "prove",
    "prove_rule",
]
