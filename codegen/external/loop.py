"""Loops whose trip count or condition depends on data (ONNX `Loop`, imported as a global
function with `Loop=1`, egraph_ir/loops.py says what it means) in compiled programs.

Each loop function becomes a region of the built-in `egc.loop` target. Its code
generator compiles the body, one step of (step, condition, carried, outside) -> (next
condition, carried), natively as a program of its own (codegen.build: the whole standard
pipeline optimises it, and a loop or If inside it is handled again when it is built);
the runner calls it while the step is below the trip count and the condition holds,
feeding each step's carried values to the next. Shapes are static, so every step runs in
the same compiled program and arena. Being a region, it is saved and loaded like one.
"""

from __future__ import annotations

from collections.abc import Callable
from graphlib import TopologicalSorter
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError
from egraph_ir.expr import Constant, Expr, Function, GlobalVar, Var
from egraph_ir.infer import infer_type
from egraph_ir.loops import carried_count, is_loop, run_loop
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order, rebuild

from . import Runner, write_outputs
from .control import has_if, lift_ifs, program_of

TARGET = "egc.loop"


def lift_control_flow(mod: IRModule) -> IRModule:
    """Loops made regions, then each data-dependent If of main lifted into one (after the
    loops: an If's branch may call a loop)."""
    if has_loops(mod):
        mod = mark_loops(mod)
    return lift_ifs(mod) if has_if(mod) else mod


def has_loops(mod: IRModule) -> bool:
    return any(is_loop(fn) for _, fn in mod.items())


def mark_loops(mod: IRModule) -> IRModule:
    """mod with every loop function an `egc.loop` region; a loop that another loop's body
    calls goes into that body as a literal (it becomes a global again when the body is
    built as a program)."""
    mod = infer_type(mod)
    loops = {name: fn for name, fn in mod.items() if is_loop(fn)}
    calls = {name: _globals_called(fn) & set(loops) for name, fn in loops.items()}
    marked: dict[str, Function] = {}
    for name in TopologicalSorter(calls).static_order():  # inner loops first
        fn = loops[name]
        memo: dict[Expr, Expr] = {}
        for x in post_order(fn.body, into_functions=False):
            if isinstance(x, GlobalVar) and x.name_hint in marked:
                memo[x] = marked[x.name_hint]
            elif isinstance(x, Var | Constant | Function | GlobalVar):
                memo[x] = x
            else:
                memo[x] = rebuild(x, memo)
        region = Function(fn.params, memo[fn.body], fn.ret_type, fn.attrs, fn.span)
        for key, value in (("Primitive", 1), ("Compiler", TARGET), ("global_symbol", name)):
            region = region.with_attr(key, value)
        marked[name] = region
    return infer_type(IRModule({**dict(mod.items()), **marked}))


def _globals_called(fn: Function) -> set[str]:
    return {x.name_hint for x in post_order(fn.body) if isinstance(x, GlobalVar)}


def region_builder(build_program: Callable[[IRModule], Any]) -> Callable[..., Runner]:
    """The code generator of `egc.loop` regions over `build_program` (codegen.build,
    which registers it: this module must not import the builder that imports it)."""

    def build(fn: Function, threads: int) -> Runner:
        if not all(isinstance(p.type_annotation, TensorType) for p in fn.params):
            raise CodegenError(f"loop @{fn.attrs.get('global_symbol')}: a parameter is a tuple")
        carried = carried_count(fn)
        step_fn = Function(fn.params, fn.body)  # one step, an ordinary program
        exe: Any = build_program(program_of(step_fn))
        names = [p.name_hint for p in fn.params]

        def step(values: list[Any]) -> Any:
            feeds = {n: v for n, v in zip(names, values, strict=True) if n in exe.input_types}
            return exe.run(**feeds)

        def run(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
            write_outputs(outputs, run_loop(step, inputs, carried))

        return run

    return build
