"""What the generated code of a fused group depends on: the key identical groups share
one compiled kernel by (codegen/lower/cache.py), and symbolic groups one kernel for every
size by (codegen/lower/symbolic.py)."""

from __future__ import annotations

from typing import Any

from egraph_ir.expr import Call, Constant, Expr, Function
from egraph_ir.expr import children as expr_children
from egraph_ir.visitor import post_order

from .compute.gather import byte_table


def group_key(fn: Function) -> tuple[Any, ...]:
    """What the generated code of a primitive function depends on: everything but the
    values of its non-scalar constants (those are bound as buffers), except small byte
    tables, which a table read bakes into the code (loop_ir.Lookup)."""
    number: dict[Expr, int] = {p: i for i, p in enumerate(fn.params)}
    key: list[Any] = [tuple(str(p.checked_type) for p in fn.params)]
    for node in post_order(fn.body):
        if node in number:
            continue
        number[node] = len(number)
        if isinstance(node, Constant):
            data = node.data
            baked = data.size == 1 or (data.ndim == 1 and byte_table(data))  # in the code
            value = data.tobytes() if baked else None
            key.append(("const", data.shape, str(data.dtype), value))
        elif isinstance(node, Call):
            attrs = tuple(sorted((k, repr(v)) for k, v in dict(node.attrs).items()))
            args = tuple(number[a] for a in node.args)
            key.append((getattr(node.op, "name", "?"), attrs, args, str(node.checked_type)))
        else:
            children = tuple(number.get(c, -1) for c in expr_children(node))
            key.append((type(node).__name__, children, getattr(node, "index", None)))
    return tuple(key)
