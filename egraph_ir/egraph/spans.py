"""Where extracted calls came from: the source spans (ONNX node names) of the encoded
program carried onto the calls extraction chose, so a profile row can name the model's
nodes after rewriting.

A chosen class takes the spans of the original calls in it. An original call whose class
the extraction did not use was absorbed by a rewrite (a batch norm folded into the
convolution before it, say): its span goes to the nearest chosen class above it in the
original program, unless its class is a layout conversion of a chosen class (the blocked
form of a convolution was chosen): then to that class. A chosen class that holds no
original call was made by a rewrite of the call above it (a layer norm spelled out as
mean, subtract, ...): it takes that call's span.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import Span
from .cycles import reachable
from .extract import Choice
from .graph import Snapshot, TensorEGraph, Value

MAX_CLIMB = 64  # classes walked up from an absorbed call before its name is dropped


def class_spans(g: TensorEGraph, snap: Snapshot, choice: Choice, root: Value) -> dict[Value, Span]:
    """A span per chosen class of the extracted program (several names are joined with
    ' + ', in the model's order)."""
    order = reachable(choice, root)  # children before parents
    used = set(order)
    parents: dict[int, list[int]] = {}
    for h, kids in g.operands.items():
        for k in kids:
            parents.setdefault(k, []).append(h)
    found: dict[Value, list[Span]] = {}
    for h, span in g.spans.items():
        moved = _converted(snap, snap.handle_class.get(h), used)
        owners = [moved] if moved is not None else _owners(h, snap.handle_class, parents, used)
        for c in owners:
            found.setdefault(c, []).append(span)
    result = {c: joined for c, spans in found.items() if (joined := Span.join(spans))}
    for c in reversed(order):  # parents first: a rewrite's new classes take its span
        if c in result:
            for kid in choice[c].children:
                result.setdefault(kid, result[c])
    return result


def _converted(snap: Snapshot, c: Value | None, used: set[Value]) -> Value | None:
    """An unused class that is a layout conversion of a chosen one (a convolution whose
    blocked form was chosen) stands for that one: its span goes there, not upwards."""
    if c is None or c in used:
        return None
    for node in snap.by_class.get(c, ()):
        if node.ctor == "op_layout_transform" and node.children[0] in used:
            return node.children[0]
    return None


def _owners(
    h: int, handle_class: Mapping[int, Value], parents: Mapping[int, list[int]], used: set[Value]
) -> list[Value]:
    """The chosen classes that stand for handle h: its own, or the nearest above it."""
    start = handle_class.get(h)
    if start in used:
        return [start]
    owners: list[Value] = []
    frontier, seen = [h], {h}
    for _ in range(MAX_CLIMB):
        if not frontier:
            break
        above = []
        for x in frontier:
            for p in parents.get(x, ()):
                if p in seen:
                    continue
                seen.add(p)
                c = handle_class.get(p)
                if c in used:
                    owners.append(c)
                else:
                    above.append(p)
        if owners:
            break
        frontier = above
    return owners
