"""Data-dependent `If` in compiled programs: each `If` of main becomes a region of the
built-in `egc.control` target, whose code generator compiles both branches natively
(codegen.build, each with its own arena) and picks one at run time by the condition.

The graph executor runs a fixed list of kernels; an `If` is one kernel of that list whose
runner reads the condition and runs the taken branch's executable (TVM's VM does the same
with its If instruction). A branch is compiled as a program of its own over the values it
reads from outside, so the whole standard pipeline optimises it, and an `If` nested in a
branch is lifted again when that branch is built. Being a region, it is saved and loaded
like one (a loaded file compiles its branches again from their IR). A branch that calls a
global function (an external region partitioned before) carries it as a function literal
and gets it back as a global when the branch is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError
from egraph_ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Tuple, TupleGetItem, Var
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.types import TupleType, Type
from egraph_ir.visitor import post_order, rebuild

from . import Runner, write_outputs

TARGET = "egc.control"


def has_if(mod: IRModule) -> bool:
    return any(isinstance(e, If) for e in post_order(mod["main"].body, into_functions=False))


def lift_ifs(mod: IRModule) -> IRModule:
    """`mod` with every If of main (outside other Ifs' branches) replaced by a call of an
    `egc.control` region taking the condition and the values the branches read."""
    mod = infer_type(mod)
    main = mod["main"]
    outside, ifs = _outside_values(main.body)
    memo: dict[Expr, Expr] = {}
    functions = dict(mod.items())
    for k, e in enumerate(ifs):
        name = f"egc_if_{k}"
        while name in functions:
            name += "_"
        region, reads = _region(e, outside, name, mod)
        functions[name] = region
        memo[e] = Call(GlobalVar(name), tuple(reads), span=e.span)
    for x in post_order(main.body, into_functions=False, stop=lambda y: y in memo):
        if x not in memo:
            leaf = isinstance(x, Var | Constant | Function | GlobalVar)
            memo[x] = x if leaf else rebuild(x, memo)
    functions["main"] = Function(main.params, memo[main.body], main.ret_type, main.attrs, main.span)
    return infer_type(IRModule(functions))


def _outside_values(body: Expr) -> tuple[set[Expr], list[If]]:
    """The values main computes outside every If's branches, and the Ifs among them (a
    condition is outside; what only a branch needs is inside)."""
    outside: set[Expr] = set()
    ifs: list[If] = []
    pending = [body]
    while pending:
        root = pending.pop()
        found = [root] if isinstance(root, If) else ()  # stop= spares only what is below
        nodes = found or post_order(root, into_functions=False, stop=lambda x: isinstance(x, If))
        for e in nodes:
            if e in outside:
                continue
            outside.add(e)
            if isinstance(e, If):
                ifs.append(e)
                pending.append(e.cond)
    return outside, ifs


def _region(e: If, outside: set[Expr], name: str, mod: IRModule) -> tuple[Function, list[Expr]]:
    """The If as a function of its condition and the outside tensors its branches read (a
    tuple read whole comes in field by field); a global function a branch calls goes with
    it as a literal."""
    reads: list[Expr] = []
    inputs: list[Var] = []
    memo: dict[Expr, Expr] = {e.cond: _tensor_inputs(e.cond, reads, inputs)}

    def read_from_outside(x: Expr) -> bool:
        """Computed outside the If: a value of main's, or a field of one."""
        while isinstance(x, TupleGetItem):
            x = x.tuple_value
        return x in outside or isinstance(x, Var)

    for branch in (e.true_branch, e.false_branch):
        for x in post_order(branch, into_functions=False, stop=lambda y: y in memo):
            if isinstance(x, GlobalVar):
                if x.name_hint not in mod:
                    raise CodegenError(f"an If's branch calls @{x.name_hint}, which is not defined")
                memo[x] = mod[x.name_hint]  # carried as a literal, a global again when built
            elif read_from_outside(x):
                memo[x] = _tensor_inputs(x, reads, inputs)
            else:
                memo[x] = x if isinstance(x, Constant | Function) else rebuild(x, memo)
    body = If(memo[e.cond], memo[e.true_branch], memo[e.false_branch], e.span)
    fn = Function(tuple(inputs), body)
    for key, value in (("Primitive", 1), ("Compiler", TARGET), ("global_symbol", name)):
        fn = fn.with_attr(key, value)
    return fn, reads


def _tensor_inputs(x: Expr, reads: list[Expr], inputs: list[Var], t: Type | None = None) -> Expr:
    """The region's view of an outside value: a parameter per tensor it holds (`reads`
    gets what main passes, `inputs` the parameters), rebuilt into tuples as its type is
    (recursion over tuple nesting only)."""
    t = t if t is not None else x.checked_type
    if isinstance(t, TupleType):
        fields = (
            _tensor_inputs(TupleGetItem(x, i), reads, inputs, f) for i, f in enumerate(t.fields)
        )
        return Tuple(tuple(fields))
    var = Var("cond" if not inputs else f"v{len(inputs)}", t)
    reads.append(x)
    inputs.append(var)
    return var


def program_of(fn: Function) -> IRModule:
    """A branch as a module: the regions it carries as literals become globals again."""
    globals_: dict[str, Function] = {}
    memo: dict[Expr, Expr] = {}
    for x in post_order(fn.body, into_functions=False):
        callee = x.op if isinstance(x, Call) else None
        if isinstance(callee, Function) and callee.attrs.get("Compiler") and callee not in memo:
            name = str(callee.attrs.get("global_symbol") or f"region_{len(globals_)}")
            globals_[name] = callee
            memo[callee] = GlobalVar(name)
        leaf = isinstance(x, Var | Constant | Function | GlobalVar)
        memo[x] = x if leaf else rebuild(x, memo)
    main = Function(fn.params, memo[fn.body], fn.ret_type, fn.attrs, fn.span)
    return infer_type(IRModule({**globals_, "main": main}))


def region_builder(build_program: Callable[[IRModule], Any]) -> Callable[..., Runner]:
    """The code generator of `egc.control` regions over `build_program` (codegen.build,
    which registers it: this module must not import the builder that imports it)."""

    def build(fn: Function, threads: int) -> Runner:
        """Both branches compiled as programs of the region's parameters; the runner reads
        the condition (its first input) and runs one."""
        assert isinstance(fn.body, If)
        branches = []
        for branch in (fn.body.true_branch, fn.body.false_branch):
            branches.append(build_program(program_of(Function(fn.params, branch))))
        taken, other = branches
        names = [p.name_hint for p in fn.params]

        def run(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
            flag = bool(np.asarray(inputs[0]).reshape(-1)[0])
            exe: Any = taken if flag else other
            feeds = {n: v for n, v in zip(names, inputs, strict=True) if n in exe.input_types}
            write_outputs(outputs, exe.run(**feeds))  # a branch may not read every input

        return run

    return build
