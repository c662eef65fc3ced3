"""One verdict per rule for `egc rules list`: proven (z3), tested (the prover cannot say,
the property checker finds nothing), refuted (either finds a counterexample) or not yet
checked.

Proving and testing every built-in rule takes about two minutes, so verdicts are kept in
the user's cache folder (`rule-verdicts.json` beside the compile cache), keyed by the rule's
own text and by the source of the checkers: editing a rule, or upgrading the prover,
checks it again. Rules parsed from a string (no file) are checked but not kept.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import rules
from rules.rule import Rule, RuleSet

from .compile_cache import cache_root

Verdict = Literal["proven", "tested", "refuted", "unknown", "not checked"]


@dataclass(frozen=True)
class RuleVerdict:
    rule: str
    location: str
    tags: tuple[str, ...]
    verdict: Verdict
    reason: str


def verdicts(
    rule_set: RuleSet,
    check: bool,
    timeout: float = 10.0,
    max_examples: int = 30,
    store: Path | None = None,
) -> list[RuleVerdict]:
    """Each rule's verdict: from the store where its text was checked before; else, with
    `check`, proven or refuted by z3, or tested by the property checker where z3 cannot
    say; else "not checked"."""
    path = store or cache_root() / "rule-verdicts.json"
    kept = _read(path)
    out = []
    for rule in rule_set:
        key = _key(rule, timeout, max_examples)
        if key and key in kept:
            verdict, reason = kept[key]
        elif check:
            verdict, reason = _check(rule, timeout, max_examples)
            if key:
                kept[key] = (verdict, reason)
        else:
            verdict, reason = "not checked", "egc rules list --prove checks it"
        out.append(RuleVerdict(rule.name, rule.location, rule.tags, verdict, reason))
    if check:
        _write(path, kept)
    return out


def _check(rule: Rule, timeout: float, max_examples: int) -> tuple[Verdict, str]:
    proof = rules.prove_rule(rule, timeout=timeout)
    if proof.status in ("proven", "refuted"):
        return proof.status, proof.reason
    report = rules.check_soundness(RuleSet([rule]), max_examples=max_examples)
    if not report.ok:
        return "refuted", f"the property checker: {str(report).splitlines()[-1].strip()}"
    return "tested", f"{max_examples} random bindings agree; z3: {proof.reason}"


def _key(rule: Rule, timeout: float, max_examples: int) -> str | None:
    text = _rule_text(rule)
    if text is None:
        return None
    digest = hashlib.sha256()
    for part in (text, str(timeout), str(max_examples), _checkers()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _rule_text(rule: Rule) -> str | None:
    """The rule's lines in its file (its header, sides and guards), None without a file."""
    source = Path(rule.span.file) if rule.span.file else None
    if source is None or not source.is_file():
        return None
    lines = source.read_text().splitlines()[rule.span.line - 1 :]
    body = [lines[0]]
    for line in lines[1:]:
        if not line.strip() or not line[:1].isspace():
            break
        body.append(line)
    return "\n".join(body)


@cache
def _checkers() -> str:
    """A digest of the rules package's source: the prover and checker that gave a verdict."""
    digest = hashlib.sha256()
    for path in sorted(Path(rules.__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _read(path: Path) -> dict[str, tuple[Verdict, str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: (v[0], v[1]) for k, v in data.items() if isinstance(v, list) and len(v) == 2}


def _write(path: Path, kept: dict[str, tuple[Verdict, str]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: list(v) for k, v in kept.items()}))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs the next run the checks again


__all__ = ["RuleVerdict", "Verdict", "verdicts"]
