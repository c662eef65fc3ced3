"""The back end's configuration: the `codegen.*` config keys and `BuildOptions`, their one
typed value.

`codegen.build` reads the keys once from the current PassContext into a BuildOptions and
passes that value whole to the stages that need it; the executable keeps it and `save`
writes it into the artifact. Its run-time half (`threads`, `check_devices`) can be changed
when an artifact is loaded (`codegen.load(path, threads=...)`).

The keys are declared here, in the package that reads them; passmgr finds this module
through the `egraph_compiler.config` entry point when a `codegen.*` key is used before
`import codegen`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import passmgr as pm
from egraph_ir.errors import CodegenError, ConfigError

from .plan.memory import MemoryPool, list_memory_planners, parse_pools

MAX_THREADS = 1024  # a thread budget above this is a mistake, not a machine


def _check_threads(value: int) -> None:
    if not 0 <= value <= MAX_THREADS:
        raise ConfigError(
            f"codegen.num_threads={value}: give 0 (every core) up to {MAX_THREADS} "
            f"(this machine has {default_threads()} cores)"
        )


pm.register_config(
    "codegen.num_threads",
    int,
    0,
    "thread budget, BLAS included (0: all cores; compile helpers never exceed the cores)",
    validate=_check_threads,
)
pm.register_config("codegen.host_fallback", bool, True, "run ops without compute with numpy")
pm.register_config(
    "codegen.memory_planner",
    str,
    "arena",
    "memory planner: arena, conflicts, hill-climb, tokens or a registered one",
    choices=list_memory_planners,
)
pm.register_config(
    "codegen.memory_pools",
    str,
    "",
    'memory pools in order, e.g. "sram:256K,dram" (a size caps a pool; empty: one pool)',
    validate=parse_pools,
)
pm.register_config(
    "codegen.check_devices", bool, False, "check every kernel's buffers lie on its device"
)
pm.register_config(
    "codegen.depth_first",
    bool,
    True,
    "run a batched CNN's large-plane first layers image by image (codegen/plan/depth_first.py)",
)
pm.register_config(
    "codegen.kernel_db",
    str,
    "auto",
    "measured kernel choices (egc tune): auto (this CPU's file in the user cache), off, or a path",
)


THREADS_ENV = "EGC_NUM_THREADS"


def threads_from_env() -> int | None:
    """EGC_NUM_THREADS: the thread count when neither the config nor `load` says (0 or
    unset: every core)."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise CodegenError(f"{THREADS_ENV}={text!r}: give a thread count (0: every core)")
    return int(text) or None


def _check_external_options(value: dict[str, Any]) -> None:
    if not all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items()):
        raise CodegenError(
            f"codegen.external_options: give {{target: {{option: value}}}}, got {value!r}"
        )


pm.register_config(
    "codegen.external_options",
    dict,
    {},
    "options per external target, {target: {option: value}}, handed to its code generator",
    validate=_check_external_options,
)


def _check_budget(value: dict[str, Any]) -> None:
    if not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in value.items()
    ):
        raise CodegenError(f"codegen.memory_budget: give {{device: bytes}}, got {value!r}")


pm.register_config(
    "codegen.memory_budget",
    dict,
    {},
    'arena bytes each device may use, {device: bytes} (e.g. {"cpu:1": 1048576}); over it, '
    "the build fails naming the device",
    validate=_check_budget,
)


def parse_bounds(value: Any) -> dict[str, tuple[int, int]]:
    """{"seq": [1, 512]} or {"seq": "1..512"}: each size variable's lowest and highest
    value, or a clear error."""
    if not isinstance(value, dict):
        raise ConfigError(f'codegen.size_bounds: give {{"seq": [1, 512]}}, got {value!r}')
    bounds = {}
    for name, bound in value.items():
        pair = bound.split("..") if isinstance(bound, str) else bound
        try:
            low, high = (int(v) for v in pair)
        except (TypeError, ValueError):
            raise ConfigError(
                f'codegen.size_bounds: {name}: give [low, high] or "low..high", got {bound!r}'
            ) from None
        if not 0 <= low <= high:
            raise ConfigError(f"codegen.size_bounds: {name}: need 0 <= low <= high, got {bound!r}")
        bounds[str(name)] = (low, high)
    return bounds


pm.register_config(
    "codegen.size_bounds",
    dict,
    {},
    'the values a symbolic program\'s sizes take, {"seq": [1, 512]} or {"seq": "1..512"}: '
    "runs outside them are refused, and kernels are chosen for the upper bounds",
    validate=parse_bounds,
)


def default_threads() -> int:
    """Every core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """How to build and run: compile-time choices and the run-time half (threads, device
    checks), resolved (a thread count of 0 in the config means every core)."""

    threads: int = 1
    host_fallback: bool = True
    memory_planner: str = "arena"
    memory_pools: str = ""
    check_devices: bool = False
    kernel_db: str = "auto"  # where lowering reads measured choices (codegen/measure/choices.py)
    depth_first: bool = True  # the large-plane first layers image by image
    external_options: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    memory_budget: dict[str, int] = dataclasses.field(default_factory=dict)  # device -> bytes
    # a symbolic program's sizes: name -> (lowest, highest) (codegen.size_bounds)
    size_bounds: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    @staticmethod
    def from_context(ctx: pm.PassContext | None = None) -> BuildOptions:
        """The options the context's config says (the current context by default)."""
        ctx = ctx or pm.PassContext.current()
        return BuildOptions(
            threads=int(ctx.get_config("codegen.num_threads"))
            or threads_from_env()
            or default_threads(),
            host_fallback=bool(ctx.get_config("codegen.host_fallback")),
            memory_planner=str(ctx.get_config("codegen.memory_planner")),
            memory_pools=str(ctx.get_config("codegen.memory_pools")),
            check_devices=bool(ctx.get_config("codegen.check_devices")),
            kernel_db=str(ctx.get_config("codegen.kernel_db")),
            depth_first=bool(ctx.get_config("codegen.depth_first")),
            external_options=dict(ctx.get_config("codegen.external_options")),
            memory_budget=dict(ctx.get_config("codegen.memory_budget")),
            size_bounds=parse_bounds(ctx.get_config("codegen.size_bounds")),
        )

    @property
    def pools(self) -> tuple[MemoryPool, ...]:
        return parse_pools(self.memory_pools)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> BuildOptions:
        known = {f.name for f in dataclasses.fields(BuildOptions)}
        given = {k: v for k, v in data.items() if k in known}
        given["size_bounds"] = parse_bounds(given.get("size_bounds", {}))  # lists in JSON
        return BuildOptions(**given)

    def at_run_time(
        self, threads: int | None = None, check_devices: bool | None = None
    ) -> BuildOptions:
        """These options with the run-time half overridden (None: keep). The kernels were
        split into chunks for the compiled thread count; fewer threads share those chunks,
        more would find no more to do, so a count above the compiled one is refused."""
        new = self
        if threads is not None:
            if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
                raise CodegenError(f"threads must be a count (0: all cores), got {threads!r}")
            count = min(threads or default_threads(), self.threads)
            if threads > self.threads:
                raise CodegenError(
                    f"threads={threads}: this executable was compiled for {self.threads} "
                    f"thread(s); compile it again with codegen.num_threads={threads}"
                )
            new = dataclasses.replace(new, threads=count)
        if check_devices is not None:
            new = dataclasses.replace(new, check_devices=bool(check_devices))
        return new
