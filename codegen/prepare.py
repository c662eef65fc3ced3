"""The module a build starts from: parameters bound to constants, function values reduced
away or refused by name, main's outputs typed and named; and the check of the arenas
against their budgets, before any code is emitted."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Expr, Function, Var
from egraph_ir.infer import infer_type
from egraph_ir.inline import reduce_closures
from egraph_ir.module import IRModule
from egraph_ir.types import FuncType, TensorType, Type, tensor_types
from egraph_ir.visitor import post_order, rebuild

from .plan.graph import output_leaves


def bind_params(mod: IRModule, params: Mapping[str, np.ndarray]) -> IRModule:
    """Replace main's parameters named in params by constants (shapes and dtypes checked)."""
    fn = mod["main"]
    by_name = {p.name_hint: p for p in fn.params}
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise CodegenError(f"params {unknown} are not parameters of main; it has {sorted(by_name)}")
    memo: dict[Expr, Expr] = {}
    for name, value in params.items():
        p = by_name[name]
        t = p.checked_type
        array = np.asarray(value)
        assert isinstance(t, TensorType)
        if array.shape != t.shape or str(array.dtype) != t.dtype:
            raise CodegenError(
                f"param '{name}' is {array.dtype}{list(array.shape)}, "
                f"the function expects {t.dtype}{list(t.shape)}"
            )
        memo[p] = Constant(array)
    for node in post_order(fn.body):
        if node not in memo:
            memo[node] = node if isinstance(node, Var | Constant) else rebuild(node, memo)
    kept = tuple(p for p in fn.params if p.name_hint not in params)
    attrs = fn.attrs
    if "param_virtual_devices" in attrs:  # devices of the parameters that stay
        pairs = zip(fn.params, attrs["param_virtual_devices"], strict=False)
        attrs = attrs.with_(param_virtual_devices=[d for p, d in pairs if p in kept])
    new = Function(kept, memo[fn.body], fn.ret_type, attrs)
    return infer_type(mod.with_function("main", new))


def without_closures(mod: IRModule) -> IRModule:
    """main with its function values reduced away (egraph_ir.inline.reduce_closures):
    a let-bound or passed function called where it is known becomes plain data flow."""
    main = mod["main"]
    if not any(isinstance(e, Call) and isinstance(e.op, Var | Call) for e in post_order(main.body)):
        return mod  # no function value is called
    body = reduce_closures(main.body)
    return infer_type(mod.with_function("main", Function(main.params, body, None, main.attrs)))


def refuse_function_values(main: Function) -> None:
    """main must take and return tensors: a closure (a function as a value) has no native
    form, so say so by name, not as a stray free variable (or a KeyError) later."""
    kinds = [("takes", p.checked_type) for p in main.params]
    kinds.append(("returns", main.body.checked_type))
    for what, t in kinds:
        pending = [t]
        while pending:
            x = pending.pop()
            if isinstance(x, FuncType):
                raise CodegenError(
                    f"main {what} a function ({x}): a closure has no compiled form; call it "
                    "inside main (the inliner then removes it) or keep it in the interpreter"
                )
            pending.extend(getattr(x, "fields", ()))


def outputs_of(fn: Function) -> tuple[list[Type], list[str]]:
    """The types of main's outputs (the values of a tuple result, nested tuples flattened)
    and their names: the function's `output_names` attribute (ONNX import sets it), else
    output, output1, ..."""
    types: list[Type] = [
        t for leaf in output_leaves(fn.body)[0] for t in tensor_types(leaf.checked_type)
    ]
    names = [str(n) for n in fn.attrs.get("output_names", ())]
    if len(names) != len(types):
        names = ["output"] if len(types) == 1 else [f"output{i}" for i in range(len(types))]
    return types, names


def check_budget(used: Mapping[str, int], budget: Mapping[str, int]) -> None:
    """Each device's arena within its budget (codegen.memory_budget), or a clear error
    before any code is emitted; a budget for a device the program does not use is a typo."""
    unknown = sorted(set(budget) - set(used))
    if unknown:
        raise CodegenError(
            f"codegen.memory_budget names device(s) {unknown} the program does not use; "
            f"its devices: {', '.join(used)}"
        )
    for device, limit in budget.items():
        if used[device] > limit:
            raise CodegenError(
                f"device {device} needs {used[device]:,} bytes of arena, over its budget of "
                f"{limit:,} (codegen.memory_budget): place less there (on_device, "
                "PlanDevices) or raise the budget"
            )


__all__ = [
    "bind_params",
    "check_budget",
    "outputs_of",
    "refuse_function_values",
    "without_closures",
]
