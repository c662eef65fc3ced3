"""PartitionGraph: every annotated region of a target becomes a global function.

A region of target T in function F becomes `@tvmgen_default_<T>_<F>_<k>` (T sanitised to a
C identifier; k counts the module's partitions) with the attributes Primitive=1, Inline=1,
Compiler=T and global_symbol, called from F in the region's place. Its parameters, one per
distinct value entering the region, are named `<T>_<k>_i<n>`; constants are copied in when
`bind_constants` (else passed as arguments). A region with several outputs returns a tuple
that F reads with tuple fields; a value leaving the region to several consumers is one
output. `default` regions stay inline; all annotations disappear. A hook registered with
`register_region_optimizer(T, fn)` rewrites each new function of target T.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from egraph_ir.attrs import Attrs
from egraph_ir.errors import PassError
from egraph_ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    Tuple,
    TupleGetItem,
    Var,
    children,
)
from egraph_ir.infer import infer_type
from egraph_ir.inline import rebuild_keeping_functions
from egraph_ir.module import IRModule

from ...context import PassContext
from ...pass_base import SKIP_ATTRS, ModulePass, Pass
from ...registry import register_pass
from ...run import PassReport, record
from .regions import DEFAULT, Region, RegionSet, annotation, find_regions, inputs

RegionOptimizer = Callable[[Function], Function] | Pass
_OPTIMIZERS: dict[str, RegionOptimizer] = {}


def register_region_optimizer(target: str, fn: RegionOptimizer | None) -> None:
    """Run `fn` on every function PartitionGraph makes for `target` (None removes it):
    a function of a Function, or a pass (`pm.passes.FoldConstant()`, a Sequential)."""
    if fn is None:
        _OPTIMIZERS.pop(target, None)
    else:
        _OPTIMIZERS[target] = fn


def optimise_region(optimise: RegionOptimizer, fn: Function) -> Function:
    """A region through its target's hook. A pass sees the region as a plain function
    (function passes skip `Compiler` functions, which made a pass hook a no-op); the
    region keeps its own attributes."""
    if not isinstance(optimise, Pass):
        return optimise(fn)
    kept = Attrs({k: v for k, v in fn.attrs.items() if k not in SKIP_ATTRS})
    plain = Function(fn.params, fn.body, fn.ret_type, kept, fn.span)
    out = optimise(IRModule.from_expr(plain))["main"]
    return Function(out.params, out.body, out.ret_type, fn.attrs, fn.span)


def symbol(target: str) -> str:
    """The target's name as part of a C identifier."""
    return re.sub(r"\W", "_", target)


@register_pass
@dataclass(frozen=True)
class PartitionGraph(ModulePass):
    """Lift annotated regions into global functions (see the module docstring)."""

    bind_constants: bool = True
    required = ("InferType",)
    idempotent = True

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        funcs = dict(mod.items())
        counter = [0]
        new: dict[str, Function] = {}
        changed = False
        regions: dict[str, int] = {}
        for name, fn in funcs.items():
            if any(fn.attrs.get(a) for a in ("Primitive", "Compiler", "SkipOptimization")):
                new[name] = fn
                continue
            rs = find_regions(fn.body)
            if not any(r.target for r in rs.regions.values()):
                new[name] = fn
                continue
            body, lifted = _Partitioner(rs, name, self.bind_constants, funcs, counter).run()
            for gname, gfn in lifted.items():
                optimise = _OPTIMIZERS.get(str(gfn.attrs["Compiler"]))
                new[gname] = optimise_region(optimise, gfn) if optimise else gfn
                target = str(gfn.attrs["Compiler"])
                regions[target] = regions.get(target, 0) + 1
            new[name] = Function(fn.params, body, fn.ret_type, fn.attrs, fn.span)
            changed = True
        record(PartitionReport(regions=regions))
        return infer_type(IRModule(new)) if changed else mod


def _constant(e: Expr) -> bool:
    """A constant, a tuple of constants (nested) or a field of one: a value the region can
    hold itself."""
    stack = [e]
    while stack:
        item = stack.pop()
        if isinstance(item, Tuple):
            stack.extend(item.fields)
        elif isinstance(item, TupleGetItem):
            stack.append(item.tuple_value)
        elif not isinstance(item, Constant):
            return False
    return True


@dataclass(frozen=True, slots=True)
class PartitionReport(PassReport):
    """Functions lifted out for external targets, by target."""

    regions: dict[str, int]


class _Partitioner:
    def __init__(
        self,
        rs: RegionSet,
        fname: str,
        bind_constants: bool,
        taken: dict[str, Function],
        counter: list[int],
    ) -> None:
        self.rs, self.fname, self.bind = rs, fname, bind_constants
        self.taken, self.counter = taken, counter
        self.memo: dict[Expr, Expr] = {}
        self.lifted: dict[str, Function] = {}

    def run(self) -> tuple[Expr, dict[str, Function]]:
        rs = self.rs
        external = {r for r, reg in rs.regions.items() if reg.target not in ("", DEFAULT)}
        for item in self._schedule(external):
            if isinstance(item, int):
                self._lift(rs.regions[item])
                continue
            n = item
            kind = annotation(n)
            if kind is not None:  # a default or outside annotation: the value itself
                self.memo[n] = self.memo[n.args[0]]  # type: ignore[attr-defined]
            else:
                self.memo[n] = (
                    n if isinstance(n, Var | Constant) else rebuild_keeping_functions(n, self.memo)
                )
        return self.memo[rs.nodes[-1]], self.lifted

    def _schedule(self, external: set[int]) -> list[Expr | int]:
        """Nodes outside external regions and the external regions (as their id), in an
        order where every value is made before it is read; a cycle is an error."""
        rs = self.rs
        unit: dict[Expr, Expr | int] = {}
        for n in rs.nodes:
            r = rs.region_of.get(n)
            unit[n] = r if r is not None and r in external else n
        deps: dict[Expr | int, dict[Expr | int, None]] = {}
        for n in rs.nodes:
            u = unit[n]
            mine = deps.setdefault(u, {})
            for c in children(n):
                if c in unit and unit[c] != u:
                    mine[unit[c]] = None
        order: list[Expr | int] = []
        state: dict[Expr | int, int] = {}
        for root in dict.fromkeys(unit[n] for n in rs.nodes):
            if root in state:
                continue
            stack = [(root, iter(deps[root]))]
            state[root] = 1
            while stack:
                u, it = stack[-1]
                nxt = next((d for d in it if state.get(d) != 2), None)
                if nxt is None:
                    stack.pop()
                    state[u] = 2
                    order.append(u)
                elif state.get(nxt) == 1:
                    raise PassError(
                        "annotated regions depend on each other in a cycle; run "
                        "MergeCompilerRegions on AnnotateTarget's output, or annotate "
                        "convex regions"
                    )
                else:
                    state[nxt] = 1
                    stack.append((nxt, iter(deps[nxt])))
        return order

    def _lift(self, region: Region) -> None:
        k = self.counter[0]
        sym = symbol(region.target)
        gname = f"tvmgen_default_{sym}_{self.fname}_{k}"
        while gname in self.taken or gname in self.lifted:
            k += 1
            gname = f"tvmgen_default_{sym}_{self.fname}_{k}"
        self.counter[0] = k + 1
        inner: dict[Expr, Expr] = {}
        params: list[Var] = []
        args: list[Expr] = []
        by_value: dict[Expr, Var] = {}

        def enter(value: Expr) -> Expr:
            """The region's view of a value made outside it."""
            source = value.args[0] if _is_end(value) else value  # type: ignore[attr-defined]
            if isinstance(source, Constant) and self.bind:
                return source
            if self.bind and _constant(self.memo[value]):  # a constant tuple, or a field of one
                return self.memo[value]
            if source not in by_value:
                p = Var(f"{sym}_{k}_i{len(params)}", source.checked_type)
                by_value[source] = p
                params.append(p)
                args.append(self.memo[value])
            return by_value[source]

        for b in region.begins:
            inner[b] = enter(b.args[0])
        members = set(region.members)
        for n in region.members:
            for c in inputs(n):
                if c not in inner and c not in members:
                    inner[c] = enter(c)
            inner[n] = rebuild_keeping_functions(n, inner)
        outputs = list(dict.fromkeys(e.args[0] for e in region.ends))
        if not outputs:
            raise PassError(f"a region of target '{region.target}' has no compiler_end")
        body = inner[outputs[0]] if len(outputs) == 1 else Tuple(tuple(inner[o] for o in outputs))
        fn = Function(tuple(params), body)
        for key, value in (
            ("Primitive", 1),
            ("Inline", 1),
            ("Compiler", region.target),
            ("global_symbol", gname),
        ):
            fn = fn.with_attr(key, value)
        self.lifted[gname] = fn
        result = Call(GlobalVar(gname), tuple(args))
        for e in region.ends:
            i = outputs.index(e.args[0])
            self.memo[e] = result if len(outputs) == 1 else TupleGetItem(result, i)


def _is_end(e: Expr) -> bool:
    kind = annotation(e)
    return kind is not None and kind[0] == "end"
