"""Graphviz DOT for a saturated e-graph: one cluster per e-class, edges to child classes.

Handles (`H n`, the bridge's bookkeeping) are hidden. Refused above `max_enodes`: saturated
e-graphs grow fast, and the picture is only readable for small functions.
"""

from __future__ import annotations

from ..errors import CompilerError
from .graph import ENode, Snapshot


def _label(n: ENode) -> str:
    name = n.ctor[3:] if n.ctor.startswith("op_") else n.ctor
    base, _, arity = name.rpartition("_")
    if base and arity.isdigit():
        name = base
    extras = [str(v).split("#")[0].split(":")[0] for v in n.literals if str(v) not in ("None", "")]
    text = name + (f"({', '.join(extras)})" if extras and len(", ".join(extras)) < 60 else "")
    return text.replace('"', "'")


def egraph_to_dot(snap: Snapshot, max_enodes: int = 2000, root: object = None) -> str:
    """The e-graph as DOT; the root class (if given) is drawn bold."""
    nodes = [n for n in snap.nodes if n.ctor != "H"]
    if len(nodes) > max_enodes:
        raise CompilerError(
            f"the e-graph has {len(nodes)} e-nodes, more than {max_enodes}; "
            "raise max_enodes or draw a smaller function"
        )
    classes = sorted({n.eclass for n in nodes}, key=str)
    index = {c: i for i, c in enumerate(classes)}
    lines = [
        "digraph egraph {",
        "  compound=true; node [shape=box, fontname=monospace, fontsize=10];",
    ]
    for c in classes:
        style = "bold" if c == root else "dashed"
        lines.append(f'  subgraph cluster_{index[c]} {{ style={style}; label="e{index[c]}";')
        lines.append(f"    c{index[c]} [shape=point, style=invis];")
        for k, n in enumerate(snap.by_class.get(c, [])):
            if n.ctor != "H":
                lines.append(f'    n{index[c]}_{k} [label="{_label(n)}"];')
        lines.append("  }")
    for c in classes:
        for k, n in enumerate(snap.by_class.get(c, [])):
            if n.ctor == "H":
                continue
            for child in n.children:
                if child in index:
                    lines.append(
                        f"  n{index[c]}_{k} -> c{index[child]} [lhead=cluster_{index[child]}];"
                    )
    lines.append("}")
    return "\n".join(lines) + "\n"
