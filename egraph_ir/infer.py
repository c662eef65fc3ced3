"""Type inference over whole modules: op type relations, calls, tuples, Let and If.

Types are written once into each node's `checked_type` slot (a node's type depends only on
its sub-expressions, so inferring twice is harmless). Errors name the function, the call and
its argument types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import overload

from .errors import TypeInferenceError, UnboundVariableError
from .expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    short_repr,
)
from .module import IRModule
from .registry import Op
from .types import FuncType, TensorType, TupleType, Type
from .visitor import post_order

BOOL_SCALAR = TensorType((), "bool")


@overload
def infer_type(target: IRModule) -> IRModule: ...
@overload
def infer_type(target: Expr) -> Expr: ...
def infer_type(target: IRModule | Expr) -> IRModule | Expr:
    """Infer and record the type of every node; returns its argument. A module is inferred
    once: modules are immutable, so a second call on the same module returns at once."""
    if isinstance(target, IRModule):
        if not target.typed:
            _infer_module(target)
            target.typed = True
    else:
        _Inferrer(None, "<expr>", {}, allow_free_vars=True).run(target)
    return target


def infer_new_nodes(expr: Expr) -> Expr:
    """infer_type for an expression built on typed sub-expressions (an importer adding one
    node at a time): the walk stops at typed dataflow nodes instead of revisiting the whole
    graph each time, so building n nodes costs O(n), not O(n^2)."""
    _Inferrer(None, "<expr>", {}, allow_free_vars=True).run(expr, stop=_typed_dataflow)
    return expr


def _typed_dataflow(node: Expr) -> bool:
    return node.has_type and isinstance(node, Call | Tuple | TupleGetItem | Constant)


def _signature(fn: Function) -> FuncType | None:
    """The declared type of a function when all parameters and the result are annotated."""
    if fn.ret_type is None or any(p.type_annotation is None for p in fn.params):
        return None
    return FuncType(tuple(p.type_annotation for p in fn.params), fn.ret_type)  # type: ignore[misc]


def _callees(fn: Function) -> list[str]:
    return list(dict.fromkeys(n.name_hint for n in post_order(fn) if isinstance(n, GlobalVar)))


def _infer_module(mod: IRModule) -> None:
    """Infer callees before callers; recursive calls need the callee's declared signature."""
    sigs: dict[str, FuncType] = {}
    for name, fn in mod.items():
        if (sig := _signature(fn)) is not None:
            sigs[name] = sig
    done: set[str] = set()
    for root in mod:
        stack: list[tuple[str, bool]] = [(root, False)]
        active: set[str] = set()
        while stack:
            name, expanded = stack.pop()
            if name in done:
                continue
            if expanded:
                active.discard(name)
                fn = mod[name]
                fn_type = _Inferrer(mod, name, sigs).run(fn)
                assert isinstance(fn_type, FuncType)
                sigs[name] = fn_type
                done.add(name)
                continue
            if name not in mod:
                raise UnboundVariableError(f"unknown global function @{name}")
            if name in active:
                continue  # a cycle: the declared signature must serve
            active.add(name)
            stack.append((name, True))
            for callee in _callees(mod[name]):
                if callee not in mod:
                    raise UnboundVariableError(f"in @{name}: call of unknown global @{callee}")
                if callee not in done and callee not in active:
                    stack.append((callee, False))
                elif callee in active and callee not in sigs:
                    raise TypeInferenceError(
                        f"@{callee} is called recursively from @{name}; annotate its parameter "
                        "and return types"
                    )


class _Inferrer:
    def __init__(
        self,
        mod: IRModule | None,
        fn_name: str,
        sigs: dict[str, FuncType],
        allow_free_vars: bool = False,
    ) -> None:
        self.mod, self.where, self.sigs = mod, f"in @{fn_name}", sigs
        self.allow_free_vars = allow_free_vars  # a bare expression's annotated inputs
        self.let_values: dict[Var, Expr] = {}
        self.bound: set[Var] = set()

    def _enter(self, node: Expr) -> None:
        if isinstance(node, Let):
            self.let_values[node.var] = node.value
            self.bound.add(node.var)
        elif isinstance(node, Function):
            self.bound.update(node.params)

    def run(self, expr: Expr, stop: Callable[[Expr], bool] | None = None) -> Type:
        for node in post_order(expr, self._enter, stop=stop):
            if not node.has_type or isinstance(node, Var | GlobalVar):
                node._set_type(self.type_of(node))
        return expr.checked_type

    def fail(self, msg: str) -> TypeInferenceError:
        return TypeInferenceError(f"{self.where}: {msg}")

    def type_of(self, e: Expr) -> Type:
        match e:
            case Var():
                return self._var(e)
            case Constant():
                return e.type
            case GlobalVar():
                if e.name_hint not in self.sigs and self.mod is None and e.has_type:
                    return e.checked_type  # an expression alone: keep its module's type
                if e.name_hint not in self.sigs:
                    raise UnboundVariableError(f"{self.where}: unknown global @{e.name_hint}")
                return self.sigs[e.name_hint]
            case Call():
                return self._call(e)
            case Tuple():
                return TupleType(tuple(f.checked_type for f in e.fields))
            case TupleGetItem():
                t = e.tuple_value.checked_type
                if not isinstance(t, TupleType):
                    raise self.fail(f"{short_repr(e)}: not a tuple but {t}")
                if not 0 <= e.index < len(t.fields):
                    raise self.fail(f"{short_repr(e)}: index out of range for {t}")
                return t.fields[e.index]
            case Function():
                body = e.body.checked_type
                if e.ret_type is not None and e.ret_type != body:
                    raise self.fail(f"function declares result {e.ret_type} but returns {body}")
                return FuncType(tuple(p.checked_type for p in e.params), body)
            case Let():
                return e.body.checked_type
            case If():
                c = e.cond.checked_type
                if c != BOOL_SCALAR:
                    raise self.fail(f"if condition must be {BOOL_SCALAR}, got {c}")
                t, f = e.true_branch.checked_type, e.false_branch.checked_type
                if t != f:
                    raise self.fail(f"if branches differ: {t} and {f}")
                return t
            case _:
                raise self.fail(f"unknown node {type(e).__name__}")

    def _var(self, v: Var) -> Type:
        ann = v.type_annotation
        if v in self.let_values:
            value_type = self.let_values[v].checked_type
            if ann is not None and ann != value_type:
                raise self.fail(f"let %{v.name_hint} is annotated {ann} but bound to {value_type}")
            return value_type
        if ann is None:
            if v in self.bound:
                raise self.fail(f"parameter %{v.name_hint} has no type annotation")
            raise UnboundVariableError(f"{self.where}: unbound variable %{v.name_hint}")
        if v not in self.bound and not self.allow_free_vars:
            raise UnboundVariableError(f"{self.where}: unbound variable %{v.name_hint}")
        return ann

    def _call(self, call: Call) -> Type:
        if isinstance(call.op, Op) and call.op.annotation:
            return call.args[0].checked_type
        if isinstance(call.op, Op):
            arg_types = [a.checked_type for a in call.args]
            for a, t in zip(call.args, arg_types, strict=True):
                if not isinstance(t, TensorType):
                    raise self.fail(
                        f"{short_repr(call)}: argument {short_repr(a)} is {t}, not a tensor"
                    )
            try:
                return call.op.infer(arg_types, call.attrs)  # type: ignore[arg-type]
            except TypeInferenceError as exc:
                raise self.fail(f"{short_repr(call)}: {exc}") from None
        callee = call.op.checked_type
        if not isinstance(callee, FuncType):
            raise self.fail(f"{short_repr(call)}: callee is {callee}, not a function")
        if len(callee.params) != len(call.args):
            raise self.fail(
                f"{short_repr(call)}: expects {len(callee.params)} argument(s), "
                f"got {len(call.args)}"
            )
        for i, (p, a) in enumerate(zip(callee.params, call.args, strict=True)):
            if p != a.checked_type:
                raise self.fail(
                    f"{short_repr(call)}: argument {i} is {a.checked_type}, expected {p}"
                )
        return callee.ret
