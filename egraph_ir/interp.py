"""The numpy reference interpreter: the semantics every test compares against.

Evaluation walks an explicit stack (deep dataflow does not recurse); only calls of IR
functions open a new frame. `If` evaluates just the branch it takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dims import Binding, bind_sizes
from .errors import CompilerError, TypeInferenceError, UnboundVariableError
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
    operands,
    short_repr,
)
from .loops import carried_count, is_loop, run_loop
from .module import IRModule
from .registry import Op
from .specialize import specialize, static_attrs
from .types import TensorType

Value = Any  # np.ndarray | tuple[Value, ...] | Closure


@dataclass(frozen=True, slots=True)
class Closure:
    fn: Function
    frame: _Frame | None


class _Frame:
    __slots__ = ("env", "parent")

    def __init__(self, env: dict[Var, Value], parent: _Frame | None) -> None:
        self.env, self.parent = env, parent

    def lookup(self, v: Var) -> Value:
        frame: _Frame | None = self
        while frame is not None:
            if v in frame.env:
                return frame.env[v]
            frame = frame.parent
        raise UnboundVariableError(f"unbound variable %{v.name_hint} during evaluation")


def interpret(target: IRModule | Function | Expr, /, *args: Any, **kwargs: Any) -> Value:
    """Run a module's main (or a function) on numpy inputs, given by position or by name.

    Inputs must match the parameters' annotated shapes and dtypes. Returns an array, or a
    tuple for tuple results. A module with size variables runs as its specialisation to
    the sizes the inputs give, so a size at which the program is not well typed (a mean
    over an axis of 0) is the same clear error as at compile time.
    """
    mod = target if isinstance(target, IRModule) else None
    fn = target["main"] if isinstance(target, IRModule) else target
    if not isinstance(fn, Function):
        if args or kwargs:
            raise TypeError("an expression that is not a function takes no inputs")
        return _Machine(mod, {}).eval(fn, _Frame({}, None))
    sizes: dict[str, int] = {}
    env = _bind_inputs(fn, args, kwargs, sizes)
    if sizes and mod is not None and mod["main"] is fn:
        try:
            static = specialize(mod, sizes)["main"]
        except TypeInferenceError as exc:
            raise TypeInferenceError(f"at sizes {sizes}: {exc}") from None
        env = {new: env[old] for old, new in zip(fn.params, static.params, strict=True)}
        fn = static
    return _Machine(mod, sizes).eval(fn.body, _Frame(env, None))


def _bind_inputs(
    fn: Function, args: tuple[Any, ...], kwargs: Mapping[str, Any], sizes: dict[str, int]
) -> dict[Var, Value]:
    """The parameters' values; the size variables they bind go into `sizes`."""
    names = [p.name_hint for p in fn.params]
    if len(args) > len(names):
        raise TypeError(f"expected {len(names)} input(s) ({', '.join(names)}), got {len(args)}")
    values: dict[str, Any] = dict(zip(names, args, strict=False))
    for key, v in kwargs.items():
        if key not in names:
            raise TypeError(f"unknown input '{key}'; parameters: {', '.join(names)}")
        if key in values:
            raise TypeError(f"input '{key}' given twice")
        values[key] = v
    missing = [n for n in names if n not in values]
    if missing:
        raise TypeError(f"missing input(s): {', '.join(missing)}")
    env: dict[Var, Value] = {}
    bindings: list[Binding] = []  # the symbolic parameters' shapes
    for p in fn.params:
        value = values[p.name_hint]
        ann = p.type_annotation
        if isinstance(ann, TensorType):
            value = np.asarray(value)
            if str(value.dtype) != ann.dtype or (ann.is_static and value.shape != ann.shape):
                raise TypeInferenceError(
                    f"input %{p.name_hint} expects {ann}, got shape {value.shape} {value.dtype}"
                )
            if not ann.is_static:
                bindings.append((ann.shape, value.shape, f"input %{p.name_hint} ({ann})"))
        env[p] = value
    sizes.update(bind_sizes(bindings))
    return env


class _Machine:
    def __init__(self, mod: IRModule | None, sizes: Mapping[str, int]) -> None:
        self.mod = mod
        self.sizes = sizes  # what the inputs bound: attributes that are Dims read them

    def eval(self, expr: Expr, frame: _Frame) -> Value:
        memo: dict[Expr, Value] = {}
        stack = [expr]
        while stack:
            node = stack[-1]
            if node in memo:
                stack.pop()
                continue
            match node:
                case Var():
                    memo[node] = frame.lookup(node)
                case Constant():
                    memo[node] = node.data
                case GlobalVar():
                    memo[node] = self._global(node)
                case Function():
                    memo[node] = Closure(node, frame)
                case If():
                    if node.cond not in memo:
                        stack.append(node.cond)
                        continue
                    branch = node.true_branch if bool(memo[node.cond]) else node.false_branch
                    if branch not in memo:
                        stack.append(branch)
                        continue
                    memo[node] = memo[branch]
                case Let():
                    if node.value not in memo:
                        stack.append(node.value)
                        continue
                    frame.env[node.var] = memo[node.value]
                    if node.body not in memo:
                        stack.append(node.body)
                        continue
                    memo[node] = memo[node.body]
                case _:
                    kids = operands(node)
                    pending = [k for k in kids if k not in memo]
                    if pending:
                        stack.extend(reversed(pending))
                        continue
                    memo[node] = self._apply(node, memo)
            stack.pop()
        return memo[expr]

    def _global(self, gv: GlobalVar) -> Closure:
        if self.mod is None or gv.name_hint not in self.mod:
            raise UnboundVariableError(f"unknown global @{gv.name_hint}")
        return Closure(self.mod[gv.name_hint], None)

    def _apply(self, node: Expr, memo: dict[Expr, Value]) -> Value:
        match node:
            case Tuple():
                return tuple(memo[f] for f in node.fields)
            case TupleGetItem():
                return memo[node.tuple_value][node.index]
            case Call() if isinstance(node.op, Op) and node.op.annotation:
                return memo[node.args[0]]
            case Call() if isinstance(node.op, Op):
                args = [memo[a] for a in node.args]
                for a, v in zip(node.args, args, strict=True):
                    if not isinstance(v, np.ndarray):
                        raise CompilerError(
                            f"{node.op.name}: argument {short_repr(a)} is not a tensor"
                        )
                return node.op.evaluate(args, static_attrs(node.attrs, self.sizes))
            case Call():
                callee = memo[node.op]  # type: ignore[index]
                if not isinstance(callee, Closure):
                    raise CompilerError(f"{short_repr(node)}: callee is not a function")
                fn = callee.fn
                if len(fn.params) != len(node.args):
                    raise CompilerError(f"{short_repr(node)}: expects {len(fn.params)} arguments")
                args = [memo[a] for a in node.args]
                if is_loop(fn):
                    return self._loop(fn, args, callee.frame)
                env = dict(zip(fn.params, args, strict=True))
                return self.eval(fn.body, _Frame(env, callee.frame))
        raise AssertionError(type(node))

    def _loop(self, fn: Function, args: list[Value], frame: _Frame | None) -> Value:
        """A loop function's call (egraph_ir/loops.py), one step at a time."""

        def step(feeds: list[Any]) -> tuple[Value, ...]:
            env = dict(zip(fn.params, feeds, strict=True))
            return tuple(self.eval(fn.body, _Frame(env, frame)))

        return run_loop(step, args, carried_count(fn))
