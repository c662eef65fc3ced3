"""Graphviz DOT for an IRModule: one box per call, edges along the dataflow.

Look at a program with `dot -Tsvg out.dot > out.svg`. Large programs are refused above
`max_nodes` (a picture of 100,000 boxes helps nobody); raise the limit to force it.
"""

from __future__ import annotations

from .errors import CompilerError
from .expr import Call, Constant, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var, children
from .module import IRModule
from .registry import Op
from .visitor import post_order


def _label(e: Expr) -> str:
    ty = getattr(e, "_checked_type", None)
    suffix = f"\\n{ty}" if ty is not None else ""
    match e:
        case Call(op=Op() as o):
            return f"{o.name}{suffix}"
        case Call(op=GlobalVar() as g):
            return f"@{g.name_hint}{suffix}"
        case Call():
            return f"call{suffix}"
        case Var():
            return f"%{e.name_hint}{suffix}"
        case Constant():
            return f"const {tuple(e.data.shape)} {e.data.dtype}"
        case Tuple():
            return "tuple"
        case TupleGetItem():
            return f".{e.index}"
        case _:
            return type(e).__name__


def _quote(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def module_to_dot(mod: IRModule, max_nodes: int = 5000) -> str:
    """The module's functions as DOT clusters; raises CompilerError above max_nodes."""
    lines = ["digraph module {", "  node [shape=box, fontname=monospace, fontsize=10];"]
    ids: dict[Expr, str] = {}
    count = 0
    for k, (name, fn) in enumerate(mod.items()):
        lines.append(f"  subgraph cluster_{k} {{ label={_quote('@' + name)};")
        for node in post_order(fn):
            if isinstance(node, Function | GlobalVar) or node in ids:
                continue
            count += 1
            if count > max_nodes:
                raise CompilerError(
                    f"the module has more than {max_nodes} nodes; raise max_nodes to draw it"
                )
            ids[node] = f"n{count}"
            shape = ", shape=ellipse" if isinstance(node, Var | Constant) else ""
            lines.append(f"    {ids[node]} [label={_quote(_label(node))}{shape}];")
            for child in children(node):
                if child in ids:
                    lines.append(f"    {ids[child]} -> {ids[node]};")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
