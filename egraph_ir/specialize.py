"""A module with symbolic dimensions made static: `specialize(mod, {"batch": 2, "seq": 37})`
gives main's parameters those sizes and infers every type anew. What the code generator
needs until it compiles symbolic programs (issue #49), and what `shapes=` does on import."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .attrs import Attrs
from .dims import Dim, evaluate, holds_dims, size_var, substitute
from .errors import TypeInferenceError, did_you_mean
from .expr import Call, Constant, Expr, Function, Var
from .infer import infer_type
from .module import IRModule
from .registry import Op
from .types import TensorType, Type, tensor_types
from .visitor import post_order, rebuild


def sizes_or_one(types: Iterable[Type | None], given: Mapping[str, int]) -> dict[str, int]:
    """A value for each size variable the types name: the given one, else 1 (where egc
    checks, times and reports a symbolic program without --dim)."""
    return {name: int(given.get(name, 1)) for name in size_names(types)}


def symbolic_names(fn: Function) -> list[str]:
    """The size variables main's parameters name, in order of first appearance."""
    return size_names(p.type_annotation for p in fn.params)


def size_names(types: Iterable[Type | None]) -> list[str]:
    """The size variables the types name, in order of first appearance."""
    seen: dict[str, None] = {}
    for t in types:
        if isinstance(t, TensorType):
            for d in t.shape:
                if isinstance(d, Dim):
                    seen.update(dict.fromkeys(sorted(d.names)))
    return list(seen)


def size_polynomials(mod: IRModule) -> list[Dim]:
    """Every distinct dimension that names a size in main (its types, its fused groups'
    and the sizes in attributes) and each size variable alone: where one of them is 0 or 1
    an op may mean something else (an empty axis, a squeeze or broadcast of an axis of 1)."""
    fn = mod["main"]
    found: dict[Dim, None] = {size_var(n): None for n in symbolic_names(fn)}

    def add(value: object) -> None:
        if isinstance(value, Dim):
            found[value] = None
        elif isinstance(value, tuple):
            for v in value:
                add(v)

    for node in [*fn.params, *post_order(fn.body)]:
        t = node.checked_type if node.has_type else None
        for tensor in tensor_types(t) if t is not None else ():
            add(tensor.shape)
        if isinstance(node, Call):
            for value in node.attrs.values():
                add(value)
    return list(found)


def static_type(t: Type | None, sizes: Mapping[str, int]) -> Type | None:
    """t with its size variables given their values (other types as they are)."""
    if not isinstance(t, TensorType) or t.is_static:
        return t
    return TensorType(tuple(evaluate(d, sizes) for d in t.shape), t.dtype)


def static_attrs(attrs: Attrs, sizes: Mapping[str, int]) -> Attrs:
    """attrs with every size in them given its value (the same object when none holds one)."""
    if not any(holds_dims(v) for v in attrs.values()):
        return attrs
    return Attrs({k: substitute(v, sizes) for k, v in attrs.items()})


def _static_call(node: Expr, sizes: Mapping[str, int]) -> Expr:
    """A call whose attributes hold sizes with their values in; the sizes that are values
    (dim_values) become a constant."""
    if not isinstance(node, Call):
        return node
    attrs = static_attrs(node.attrs, sizes)
    if attrs is node.attrs:
        return node
    if isinstance(node.op, Op) and node.op.name == "dim_values":
        return Constant(node.op.evaluate([], attrs), node.span)
    return Call(node.op, node.args, attrs, node.span)


def _static_node(node: Expr, memo: dict[Expr, Expr], sizes: Mapping[str, int]) -> Expr:
    """node rebuilt over its rebuilt children with static sizes: a variable's annotation
    (the parameters of a fused group say `past` too); a function's result type, when it
    has sizes in it, is inferred again."""
    if isinstance(node, Var):
        t = static_type(node.type_annotation, sizes)
        return node if t is node.type_annotation else Var(node.name_hint, t)
    if isinstance(node, Function):
        new = rebuild(node, memo)
        if static_type(node.ret_type, sizes) is node.ret_type:
            return new
        # inferred anew: at some sizes a result has another rank (squeeze of an axis of 1)
        return Function(new.params, new.body, None, new.attrs, new.span)  # type: ignore[attr-defined]
    return _static_call(rebuild(node, memo), sizes)


def specialize(mod: IRModule, sizes: Mapping[str, int]) -> IRModule:
    """main with every size variable of its parameters replaced by its value in `sizes`
    (each one must be given; an unknown name is an error naming the known ones)."""
    fn = mod["main"]
    names = symbolic_names(fn)
    unknown = sorted(set(sizes) - set(names))
    if unknown:
        hint = did_you_mean(unknown[0], names)
        raise TypeInferenceError(
            f"specialize: no size variable {unknown}{hint}; main's are {names or 'none'}"
        )
    missing = [n for n in names if n not in sizes]
    if missing:
        raise TypeInferenceError(f"specialize: give a size for {', '.join(missing)}")
    if any(not isinstance(v, int) or v < 0 for v in sizes.values()):
        raise TypeInferenceError(f"specialize: sizes are non-negative integers, got {dict(sizes)}")
    memo: dict[Expr, Expr] = {}
    for node in [*fn.params, *post_order(fn.body)]:
        if node not in memo:
            memo[node] = _static_node(node, memo, sizes)
    main = Function(tuple(memo[p] for p in fn.params), memo[fn.body], None, fn.attrs)  # type: ignore[misc]
    return infer_type(mod.with_function("main", main))
