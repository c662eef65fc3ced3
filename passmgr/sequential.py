"""Pipelines of passes: Sequential, and Repeat and FixedPoint built on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from egraph_ir.module import IRModule

from .context import PassContext
from .pass_base import Pass, PassInfo, module_changed, run_pass
from .registry import get_pass
from .run import PassReport, record


class Sequential(Pass):
    """Run passes in order. Each runs if the context enables it (disabled > required >
    opt_level); its `required` passes, looked up by name, run just before it."""

    is_pipeline = True

    def __init__(
        self,
        passes: Sequence[Pass],
        opt_level: int = 0,
        name: str = "Sequential",
        required: Sequence[str] = (),
    ) -> None:
        for p in passes:
            if not isinstance(p, Pass):
                raise TypeError(f"Sequential takes passes, got {type(p).__name__}")
        self.passes = list(passes)
        self._info = PassInfo(name, opt_level, tuple(required))

    @property
    def info(self) -> PassInfo:
        return self._info

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for p in self.passes:
            if not ctx.pass_enabled(p.info):
                continue
            for name in p.info.required:
                mod = run_pass(get_pass(name), mod, ctx).module
            mod = run_pass(p, mod, ctx).module
        return mod

    def __str__(self) -> str:
        return ",".join(str(p) for p in self.passes)


class Repeat(Sequential):
    """Run a pipeline n times."""

    def __init__(self, pipeline: Pass | Sequence[Pass], n: int) -> None:
        passes = [pipeline] if isinstance(pipeline, Pass) else list(pipeline)
        super().__init__(passes, name="Repeat")
        if n < 0:
            raise ValueError(f"Repeat needs n >= 0, got {n}")
        self.n = n

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for _ in range(self.n):
            mod = super().transform(mod, ctx)
        return mod


class FixedPoint(Sequential):
    """Run a pipeline until the module stops changing, at most max_iters times."""

    def __init__(self, pipeline: Pass | Sequence[Pass], max_iters: int = 10) -> None:
        passes = [pipeline] if isinstance(pipeline, Pass) else list(pipeline)
        super().__init__(passes, name="FixedPoint")
        if max_iters < 1:
            raise ValueError(f"FixedPoint needs max_iters >= 1, got {max_iters}")
        self.max_iters = max_iters

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        for done in range(1, self.max_iters + 1):
            out = super().transform(mod, ctx)
            if not module_changed(mod, out):
                record(FixedPointReport(iterations=done, hit_max_iters=False))
                return out
            mod = out
        record(FixedPointReport(iterations=self.max_iters, hit_max_iters=True))
        return mod


@dataclass(frozen=True, slots=True)
class FixedPointReport(PassReport):
    """How many rounds a FixedPoint ran and whether it stopped at max_iters still changing."""

    iterations: int
    hit_max_iters: bool
