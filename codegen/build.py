"""`codegen.build`: optimise, fuse, lower, plan memory, generate LLVM and JIT — one call.

Runs under the current PassContext: the standard pipeline (codegen/pipelines.py) and then
FuseOps, so `opt_level`, `disabled_pass` and config keys apply as in TVM's `relay.build`.
Config: `codegen.num_threads` (0 = every core this process may use),
`codegen.host_fallback` (run groups without a compute definition with numpy, or fail),
`codegen.memory_planner` ("arena" or "tokens").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import passmgr as pm
from egraph_ir.errors import CodegenError
from egraph_ir.expr import Constant, Expr, Function, Var
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.types import TensorType
from egraph_ir.visitor import post_order, rebuild

from .executor import Graph, Runner, build_graph, default_threads, graph_json
from .memory_plan import MemoryPlan
from .pipelines import standard_pipeline

TARGETS = ("llvm",)

pm.register_config("codegen.num_threads", int, 0, "kernel threads (0: all available cores)")
pm.register_config("codegen.host_fallback", bool, True, "run ops without compute with numpy")
pm.register_config("codegen.memory_planner", str, "arena", "arena (offset packing) or tokens")


class Executable:
    """A compiled module: `run(**inputs)`, `get_source()`, `graph_json`, `memory_plan`."""

    def __init__(
        self,
        optimised: IRModule,
        fused: IRModule,
        graph: Graph,
        threads: int,
        times: dict[str, float],
    ) -> None:
        self.optimized_module = optimised  # after the rule-based pipeline, before fusion
        self.module = fused  # the fused IR that was compiled
        self.graph = graph
        self.compile_seconds = times
        self._runner = Runner(graph, threads)
        fn = fused["main"]
        self.input_types = {p.name_hint: p.checked_type for p in fn.params}

    def run(self, *args: np.ndarray, **inputs: np.ndarray) -> Any:
        """Run on numpy inputs (by name, or positionally); returns an array or a tuple."""
        names = list(self.input_types)
        if args:
            if len(args) > len(names):
                raise CodegenError(f"run takes {len(names)} input(s), got {len(args)}")
            inputs = {**dict(zip(names, args, strict=False)), **inputs}
        unknown = sorted(set(inputs) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            raise CodegenError(
                f"inputs do not match the function: missing {missing}, unknown {unknown}; "
                f"expected {names}"
            )
        feeds = []
        for name in names:
            t = self.input_types[name]
            assert isinstance(t, TensorType)
            value = np.require(inputs[name], dtype=t.dtype, requirements="C")  # keeps 0-d
            if value.shape != t.shape:
                raise CodegenError(f"input '{name}' has shape {value.shape}, expected {t.shape}")
            feeds.append(value)
        results = self._runner.run(feeds)
        return tuple(results) if self.graph.tuple_output else results[0]

    @property
    def threads(self) -> int:
        """Threads the large kernels are split over (config codegen.num_threads)."""
        return self._runner.threads

    def get_source(self) -> str:
        """The LLVM IR of the JIT kernels (before optimisation)."""
        return self.graph.source

    def get_optimized_source(self) -> str:
        return self.graph.library.optimized_ir if self.graph.library else ""

    @property
    def graph_json(self) -> str:
        return graph_json(self.graph)

    @property
    def memory_plan(self) -> MemoryPlan:
        return self.graph.plan

    def kernel_kinds(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for n in self.graph.nodes:
            if n.op in ("kernel", "alias"):
                key = n.kind or n.op
                kinds[key] = kinds.get(key, 0) + 1
        return kinds


def build(
    mod: IRModule | Function,
    target: str = "llvm",
    params: Mapping[str, np.ndarray] | None = None,
    extra_passes: Sequence[pm.Pass] = (),
) -> Executable:
    """Compile `mod` (its main function) for `target`; `params` binds inputs to constants;
    `extra_passes` (e.g. EqSat over a user's rule file) run after the standard pipeline."""
    if target not in TARGETS:
        raise CodegenError(f"unknown target '{target}'; supported: {', '.join(TARGETS)}")
    if isinstance(mod, Function):
        mod = IRModule.from_expr(mod)
    if "main" not in dict(mod.items()):
        raise CodegenError("the module has no 'main' function")
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    mod = infer_type(mod)
    if params:
        mod = bind_params(mod, params)
    ctx = pm.PassContext.current()
    optimised = pm.Sequential([standard_pipeline(), *extra_passes], name="Optimise")(mod)
    fused = pm.passes.FuseOps()(optimised)
    t1 = time.perf_counter()
    times["optimise"] = t1 - t0
    graph = build_graph(
        fused["main"],
        bool(ctx.get_config("codegen.host_fallback")),
        str(ctx.get_config("codegen.memory_planner")),
    )
    times["lower+llvm"] = time.perf_counter() - t1
    if graph.library is not None:
        times.update({f"llvm {k}": v for k, v in graph.library.seconds.items()})
    threads = int(ctx.get_config("codegen.num_threads")) or default_threads()
    return Executable(optimised, fused, graph, threads, times)


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
    new = Function(kept, memo[fn.body], fn.ret_type, fn.attrs)
    return infer_type(mod.with_function("main", new))
