"""The build stage for partitioned modules: compile each external region main calls with
its target's code generator, and give the host what stays on it.

A region whose target has no code generator, or whose code generator raises, is inlined
back into main with an ExternalFallbackWarning naming it, before anything is compiled, so
the executable is never half-built. Composite calls left on the host (their target was
not chosen) are inlined too, and annotations that no partition consumed are dropped: the
host compiles plain ops.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

from egraph_ir.expr import Call, Function, GlobalVar
from egraph_ir.infer import infer_type
from egraph_ir.inline import inline_function
from egraph_ir.module import IRModule
from egraph_ir.registry import Op
from egraph_ir.types import tensor_types
from egraph_ir.visitor import post_order
from passmgr.passes.partition.annotate_target import strip_annotations

from ..lower.kinds import ExternalKernel
from . import get_external


class ExternalFallbackWarning(UserWarning):
    """An external region runs on the host instead of its target."""


def region_ops(fn: Function) -> list[str]:
    return [n.op.name for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]


def called_regions(main: Function, mod: IRModule) -> list[str]:
    """Names of the external regions (Compiler functions) main calls, in call order."""
    names: dict[str, None] = {}
    for n in post_order(main.body, into_functions=False):
        callee = n.op.name_hint if isinstance(n, Call) and isinstance(n.op, GlobalVar) else None
        if callee is not None and callee in mod and mod[callee].attrs.get("Compiler"):
            names[callee] = None
    return list(names)


def external_kernel(
    name: str, fn: Function, threads: int, options: Mapping[str, Mapping[str, Any]] | None = None
) -> ExternalKernel:
    """The kernel of one region, compiled by its target's code generator; a generator that
    takes `options` gets its target's entry of codegen.external_options (TVM's
    `relay.ext.<target>.options`)."""
    target = str(fn.attrs["Compiler"])
    build_region = get_external(target)
    if _takes_options(build_region):
        runner = build_region(fn, threads, options=dict((options or {}).get(target, {})))
    else:
        runner = build_region(fn, threads)
    types = [(t.shape, t.dtype) for t in tensor_types(fn.body.checked_type)]
    return ExternalKernel(name, region_ops(fn), fn, runner, types)


def _takes_options(build_region: Any) -> bool:
    try:
        params = inspect.signature(build_region).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "options" or p.kind is p.VAR_KEYWORD for p in params)


def compile_regions(
    mod: IRModule, threads: int, options: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[IRModule, dict[str, ExternalKernel]]:
    """The module the host compiles and the external kernels (see the module docstring)."""
    mod = infer_type(mod)
    kernels: dict[str, ExternalKernel] = {}
    back: dict[str, Function] = {}
    for name in called_regions(mod["main"], mod):
        fn = mod[name]
        target = str(fn.attrs["Compiler"])
        try:
            kernels[name] = external_kernel(name, fn, threads, options)
        except Exception as exc:  # any failure of a target's code generator: host runs it
            warnings.warn(
                f"external region @{name} (target {target}) runs on the host: {exc}",
                ExternalFallbackWarning,
                stacklevel=3,
            )
            back[name] = fn
    main = inline_function(mod["main"], functions=back)
    body, _ = strip_annotations(main.body)  # annotations left unpartitioned are no-ops
    if body is not main.body:
        main = Function(main.params, body, main.ret_type, main.attrs, main.span)
    if main is mod["main"]:
        return mod, kernels
    funcs = {k: f for k, f in mod.items() if k not in back}
    funcs["main"] = main
    return infer_type(IRModule(funcs)), kernels
