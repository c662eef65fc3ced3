"""What device planning should achieve, by exhaustive search, for the planner's property
tests: the bytes (or link-weighted cost) copied by a planned module, and the fewest any
placement of a small program's values could copy."""

from __future__ import annotations

import itertools

import egraph_ir as ir
from egraph_ir.expr import Call, Constant, Function, Tuple, TupleGetItem
from egraph_ir.types import tensor_types
from egraph_ir.visitor import post_order


def _copies(planned: ir.IRModule) -> list[Call]:
    return [
        e
        for e in post_order(planned["main"].body)
        if isinstance(e, Call) and getattr(e.op, "name", "") == "device_copy"
    ]


def _nbytes(e: ir.Expr) -> int:
    return sum(t.nbytes for t in tensor_types(e.checked_type))


def _moved(v: ir.Expr, users: list[ir.Expr | None], k: ir.VirtualDevice, where) -> int:
    """Bytes of v that must reach device k: all of it, or of a tuple only read there by
    projections, the fields they read."""
    on_k = [u for u in users if u is not None and where[u] == k]
    if (
        not on_k
        or not all(isinstance(u, TupleGetItem) for u in on_k)
        or len(on_k) < len([u for u in users if u is None or where[u] == k])
    ):
        return _nbytes(v)
    fields = {u.index: u for u in on_k}  # type: ignore[union-attr]
    return sum(_nbytes(u) for u in fields.values())


def copied_bytes(planned: ir.IRModule) -> int:
    """Bytes the planned module copies per run: every device_copy's argument."""
    return sum(_nbytes(e.args[0]) for e in _copies(planned))


def copied_cost(planned: ir.IRModule, links) -> float:
    """What the planned module's copies cost per run: each hop's bytes times its link."""
    return sum(
        _nbytes(e.args[0])
        * links.costs.get(
            (e.attrs["src_virtual_device"], e.attrs["dst_virtual_device"]), links.default
        )
        for e in _copies(planned)
    )


def value_nodes(fn: Function) -> list[ir.Expr]:
    """The values of fn's body a planner places: calls, constants, tuples, projections."""
    kinds = Call | Constant | Tuple | TupleGetItem
    return [e for e in post_order(fn.body) if isinstance(e, kinds)]


def brute_force_cost(
    fn: Function, pins: dict[ir.Expr, ir.VirtualDevice], out_device, links=None
) -> float:
    """The fewest bytes any placement of fn's values copies, the pinned ones (parameters or
    any value of the body) on their devices: a value counts once per device other than its
    own that one of its users (an op, a tuple, a projection, the function's result) is on,
    times the cheapest route's cost per byte with `links` (1 without); a tuple read on
    another device only by projections moves just the fields they read. An explicit
    device_copy in fn is a value pinned to its destination whose operand is pinned to its
    source, so its bytes count like any copy."""
    nodes = value_nodes(fn)
    uses: dict[ir.Expr, list[ir.Expr | None]] = {}  # None: the function's result
    for e in nodes:
        if isinstance(e, Call):
            operands = e.args
        elif isinstance(e, Tuple):
            operands = e.fields
        else:
            operands = (e.tuple_value,) if isinstance(e, TupleGetItem) else ()
        for a in operands:
            uses.setdefault(a, []).append(e)
    uses.setdefault(fn.body, []).append(None)
    free = [e for e in nodes if e not in pins]
    devices = sorted({*pins.values(), out_device}, key=str)
    route = links.route if links is not None else (lambda a, b: (float(a != b), [a, b]))
    best = None
    for choice in itertools.product(devices, repeat=len(free)):
        where = {**pins, **dict(zip(free, choice, strict=True))}
        total = 0.0
        for v, users in uses.items():
            reached = {out_device if u is None else where[u] for u in users} - {where[v]}
            total += sum(_moved(v, users, k, where) * route(where[v], k)[0] for k in reached)
        best = total if best is None else min(best, total)
    assert best is not None
    return best
