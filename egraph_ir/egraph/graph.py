"""TensorEGraph: an egglog e-graph of one dataflow region, seen from Python.

All terms live in one egglog sort `T`. Ops become constructors `op_<name>` (variadic ops get
their arity appended) taking tensor children, then one String per attribute (the Python
repr of its value, in the op's declared order). Leaves are `(Var key)`, `(Const key)` and
`(Opaque key)`, whose payloads stay in Python; tuples are `Tup<n>` and `(Get t i)`.

Python refers to e-classes through integer handles `(H n)`. Insertions and unions are
queued and applied in one batch (an empty-query rule): a top-level `union` per term would
rebuild the whole e-graph each time. Types (shape and dtype) are kept per handle in Python.
"""

from __future__ import annotations

import ast
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from egglog import bindings

from ..attrs import NAN
from ..device import VirtualDevice
from ..dims import DIM_TAG, Dim, from_literal, to_literal
from ..errors import Span
from ..expr import Constant, Expr
from ..registry import Op, get_op
from ..types import Type

LEAVES = ("Var", "Const", "Opaque")
NODE_TABLES = ("Var", "Const", "Opaque", "Get")
BATCH = 500  # actions per batch rule: measured fastest among 1 to 10,000
Value = Any  # bindings.Value: an e-class id, hashable


def encode_attr(value: Any) -> str:
    """An attribute value as egglog String contents (decode_attr reads it back)."""
    if isinstance(value, VirtualDevice):  # its fields as a tagged tuple of literals
        v = value
        value = (_DEVICE_TAG, v.device_type, v.device_id, v.target, v.memory_scope)
    value = _dims_as_literals(value)
    text = repr(value)
    if '"' in text or "\\" in text:
        raise ValueError(f"attribute value {value!r} cannot be encoded")
    return text


def decode_attr(text: str) -> Any:
    """Inverse of encode_attr (repr of ints, floats incl. inf and nan, bools, None, str,
    tuples); every NaN comes back as `attrs.NAN`, so equal attributes compare equal."""
    value = _literal(ast.parse(text, mode="eval").body)
    if isinstance(value, tuple) and value[:1] == (_DEVICE_TAG,):
        return VirtualDevice(*value[1:])
    return _dims_from_literals(value)


def _dims_as_literals(value: Any) -> Any:
    """Sizes (Dims) in an attribute as tagged tuples (dims.to_literal)."""
    if isinstance(value, Dim):
        return to_literal(value)
    if isinstance(value, tuple):
        return tuple(_dims_as_literals(v) for v in value)
    return value


def _dims_from_literals(value: Any) -> Any:
    if isinstance(value, tuple):
        if value[:1] == (DIM_TAG,):
            return from_literal(value)
        return tuple(_dims_from_literals(v) for v in value)
    return value


def _literal(node: ast.expr) -> Any:
    """ast.literal_eval that also reads the names inf and nan (repr of such floats)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return math.inf if node.id == "inf" else NAN
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _literal(node.operand)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return NAN if inner is NAN else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    raise ValueError(f"not an attribute value: {ast.unparse(node)}")


_DEVICE_TAG = "<VirtualDevice>"


def op_constructor(op: Op, nargs: int) -> str:
    return f"op_{op.name}_{nargs}" if op.variadic else f"op_{op.name}"


class ENode(NamedTuple):
    """One row of a constructor table: kind, children classes, literal payload, class.
    A named tuple: every snapshot makes one per e-node, several thousand a rule round,
    and a frozen dataclass's __init__ was a tenth of an int8 model's optimisation."""

    ctor: str
    children: tuple[Value, ...]
    literals: tuple[Any, ...]  # attr strings, leaf keys, or the Get index
    eclass: Value


@dataclass
class Snapshot:
    """The e-graph frozen after a run: nodes by class, handles, and types."""

    nodes: list[ENode]
    handle_class: dict[int, Value]
    class_handles: dict[Value, list[int]] = field(default_factory=dict)
    by_class: dict[Value, list[ENode]] = field(default_factory=dict)
    relations: dict[str, list[tuple[Value, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ch: dict[Value, list[int]] = defaultdict(list)
        for h, c in self.handle_class.items():
            ch[c].append(h)
        self.class_handles = dict(ch)
        bc: dict[Value, list[ENode]] = defaultdict(list)
        for n in self.nodes:
            bc[n.eclass].append(n)
        self.by_class = dict(bc)

    @property
    def num_enodes(self) -> int:
        return len(self.nodes)

    @property
    def num_classes(self) -> int:
        return len(self.by_class)


class TensorEGraph:
    """The e-graph plus the Python-side payloads (leaves, constants, types per handle)."""

    def __init__(self) -> None:
        self.low = bindings.EGraph()
        self.declared: set[str] = set()
        self.handle_types: list[Type] = []
        self.leaves: dict[str, Expr] = {}  # Var / Opaque keys -> IR nodes
        self.encoded = 0  # IR nodes encode() put in (more than e-nodes when some were equal)
        self.constants: dict[str, Constant] = {}  # Const keys -> constants
        self.spans: dict[int, Span] = {}  # handle -> the source span of the call encoded there
        self.operands: dict[int, list[int]] = {}  # handle -> its operands' handles (encoded)
        self._pending: list[str] = []
        self._batches = 0
        self.run_text(
            "(datatype T (H i64) (Var String) (Const String) (Opaque String) (Get T i64))"
        )

    # ---------------------------------------------------------------- low level
    def run_text(self, text: str) -> list[Any]:
        return list(self.low.parse_and_run_program(text))

    def declare(self, ctor: str, signature: str) -> None:
        """Declare a constructor once, e.g. ('op_add', '(T T) T')."""
        if ctor not in self.declared:
            self.run_text(f"(constructor {ctor} {signature})")
            self.declared.add(ctor)

    def op_ctor(self, op: Op, nargs: int) -> str:
        name = op_constructor(op, nargs)
        self.declare(name, "(" + " ".join(["T"] * nargs + ["String"] * len(op.attrs)) + ") T")
        return name

    def tuple_ctor(self, n: int) -> str:
        self.declare(f"Tup{n}", "(" + " ".join(["T"] * n) + ") T")
        return f"Tup{n}"

    # ---------------------------------------------------------------- building
    def new_handle(self, ty: Type) -> int:
        self.handle_types.append(ty)
        return len(self.handle_types) - 1

    def add(self, term: str, ty: Type) -> int:
        """Queue a term (children written as `(H n)`); returns the new handle of its class."""
        h = self.new_handle(ty)
        self._pending.append(f"(union (H {h}) {term})")
        return h

    def union(self, a: int, b: int) -> None:
        self._pending.append(f"(union (H {a}) (H {b}))")

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> int:
        """Apply the queued insertions and unions, BATCH actions per rule (one rebuild per
        batch); returns how many."""
        n = len(self._pending)
        for start in range(0, n, BATCH):
            name = f"batch{self._batches}"
            self._batches += 1
            actions = " ".join(self._pending[start : start + BATCH])
            self.run_text(
                f"(ruleset {name})\n(rule () ({actions}) :ruleset {name})\n"
                f"(run-schedule (run {name}))"
            )
        self._pending = []
        return n

    def count_enodes(self) -> int:
        """E-nodes of the IR (handles excluded), without building a snapshot."""
        return sum(
            len(fn.rows)
            for name, fn in self.low.freeze().functions.items()
            if name.startswith(("op_", "Tup")) or name in NODE_TABLES
        )

    # ---------------------------------------------------------------- reading
    def snapshot(self, relations: tuple[str, ...] = ()) -> Snapshot:
        """Freeze the e-graph: IR nodes, handles and the named relations' rows. Run after
        every rule round, so written for speed: each table's child and literal positions
        found once, each literal's text read once (attribute strings repeat)."""
        frozen = self.low.freeze().functions
        nodes: list[ENode] = []
        handles: dict[int, Value] = {}
        rels: dict[str, list[tuple[Value, ...]]] = {}
        low = self.low
        texts: dict[Value, str] = {}
        for name, fn in frozen.items():
            if name == "H":
                for row in fn.rows:
                    handles[low.value_to_i64(row.inputs[0])] = row.output
            elif name in relations:
                rels[name] = [tuple(row.inputs) for row in fn.rows]
            elif name.startswith(("op_", "Tup")) or name in NODE_TABLES:
                sorts = fn.input_sorts
                kids = [k for k, s in enumerate(sorts) if s == "T"]
                strings = [(k, s == "String") for k, s in enumerate(sorts) if s != "T"]
                for row in fn.rows:
                    inputs = row.inputs
                    lits: list[int | str] = []
                    for k, is_string in strings:
                        v = inputs[k]
                        if not is_string:
                            lits.append(low.value_to_i64(v))
                        elif (text := texts.get(v)) is not None:
                            lits.append(text)
                        else:
                            lits.append(texts.setdefault(v, low.value_to_string(v)))
                    children = tuple(inputs[k] for k in kids)
                    nodes.append(ENode(name, children, tuple(lits), row.output))
        return Snapshot(nodes, handles, relations=rels)

    def string(self, value: Value) -> str:
        return str(self.low.value_to_string(value))


def ctor_op(ctor: str) -> Op:
    """The registry op of an `op_<name>[_<arity>]` constructor."""
    name = ctor[3:]
    try:
        return get_op(name)
    except KeyError:
        return get_op(name.rsplit("_", 1)[0])
