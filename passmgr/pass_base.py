"""Passes: PassInfo, Pass, ModulePass, FunctionPass (Sequential and friends: sequential.py).

A pass maps an IRModule to an IRModule under `PassContext.current()`. IR is immutable, so a
pass cannot change its input in place, and a pass that raises leaves the caller's module as
it was; the error is a PassError naming the pass and the passes that ran before it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from egraph_ir.errors import ConfigError, PassError
from egraph_ir.expr import Function
from egraph_ir.infer import infer_type
from egraph_ir.module import IRModule
from egraph_ir.structural import structural_equal

from .context import PassContext
from .info import PassInfo
from .names import PASS_NAMES
from .run import PassRun, in_block

SKIP_ATTRS = ("SkipOptimization", "Primitive", "Compiler")


@dataclass(frozen=True, slots=True)
class PassResult:
    module: IRModule
    changed: bool


def module_changed(before: IRModule, after: IRModule) -> bool:
    """True unless after has the same functions as before (by identity, else by structure)."""
    if after is before:
        return False
    if set(before) != set(after):
        return True
    return any(
        before[name] is not after[name] and not structural_equal(before[name], after[name])
        for name in before
    )


class Pass:
    """Base class. Subclasses set the class attributes or pass a PassInfo, and implement
    `transform(mod, ctx)`. Calling a pass runs it under the current context."""

    opt_level: ClassVar[int] = 0
    required: ClassVar[tuple[str, ...]] = ()
    always_run: ClassVar[bool] = False
    pass_name: ClassVar[str | None] = None
    idempotent: ClassVar[bool] = False  # a second run changes nothing (checked by testing)
    is_pipeline: ClassVar[bool] = False  # runs other passes (not counted, not in history)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        PASS_NAMES.add(cls.pass_name or cls.__name__)

    @property
    def info(self) -> PassInfo:
        return PassInfo(
            self.pass_name or type(self).__name__,
            self.opt_level,
            tuple(self.required),
            self.always_run,
        )

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError(f"{type(self).__name__} does not implement transform")

    def __call__(self, mod: IRModule) -> IRModule:
        return self.apply(mod).module

    def apply(self, mod: IRModule) -> PassResult:
        """Run the pass and say whether the module changed."""
        return run_pass(self, mod, PassContext.current())

    # ---------------------------------------------------------------- pipeline text
    def options(self) -> dict[str, Any]:
        """Options that differ from their defaults (dataclass fields), for printing."""
        if not dataclasses.is_dataclass(self):
            return {}
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            default = (
                f.default
                if f.default is not dataclasses.MISSING
                else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
            )
            if f.init and value != default:
                out[f.name] = value
        return out

    def __str__(self) -> str:
        opts = self.options()
        if not opts:
            return self.info.name
        return f"{self.info.name}({','.join(f'{k}={_option_text(v)}' for k, v in opts.items())})"


def _option_text(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, tuple | list):
        return "[" + ",".join(_option_text(x) for x in v) + "]"
    return str(v)


def run_pass(p: Pass, mod: IRModule, ctx: PassContext) -> PassResult:
    """Run one pass: disabled and bisection checks, instruments, error wrapping."""
    if not isinstance(mod, IRModule):
        raise TypeError(f"pass '{p.info.name}' expects an IRModule, got {type(mod).__name__}")
    info = p.info
    if info.name in ctx.disabled_pass:
        return PassResult(mod, False)
    run = PassRun.current()
    if not run.running:  # a new top-level call
        if not in_block():  # the thread's own run: nobody reads it later, keep it small
            run.clear()
        run.history.clear()
    if not p.is_pipeline and not ctx.bisect_allows(info):
        return PassResult(mod, False)
    if not ctx.instrument_before(mod, info):
        return PassResult(mod, False)
    before = list(run.history)
    run.running.append(info.name)
    held = mod.functions_by_name()
    try:
        out = p.transform(mod, ctx)
        if not mod.same_functions(held):
            mod.restore_functions(held)
            raise PassError(
                f"pass '{info.name}' changed its input module in place; a pass must return "
                "a new module (mod.with_function(...))"
            )
    except (PassError, ConfigError):
        ctx.instrument_failed(mod, info)
        raise  # already names the pass, or a configuration mistake rather than a pass failure
    except Exception as exc:
        ctx.instrument_failed(mod, info)
        ran = ", ".join(before) or "no passes"
        raise PassError(f"pass '{info.name}' failed after [{ran}]: {exc}") from exc
    finally:
        run.running.pop()
    if not isinstance(out, IRModule):
        raise PassError(f"pass '{info.name}' returned {type(out).__name__}, expected an IRModule")
    if not p.is_pipeline:
        run.history.append(info.name)
    ctx.instrument_after(out, info)
    return PassResult(out, module_changed(mod, out))


class ModulePass(Pass):
    """A pass over the whole module; subclasses implement `transform_module(mod, ctx)`."""

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.transform_module(mod, ctx)

    def transform_module(self, mod: IRModule, ctx: PassContext) -> IRModule:
        raise NotImplementedError(f"{type(self).__name__} does not implement transform_module")


class FunctionPass(Pass):
    """A pass applied to each function on its own; it cannot add or remove functions.

    Functions marked SkipOptimization, Primitive (fused kernels) or Compiler (external
    targets) are left alone.
    """

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        new = {}
        changed = False
        for name, fn in mod.items():
            if any(fn.attrs.get(a) for a in SKIP_ATTRS):
                new[name] = fn
                continue
            out = self.transform_function(fn, mod, ctx)
            if not isinstance(out, Function):
                raise PassError(
                    f"pass '{self.info.name}' returned {type(out).__name__} for "
                    f"@{name}, expected a Function"
                )
            changed |= out is not fn
            new[name] = out
        if not changed:
            return mod
        result = IRModule(new)
        if any(not f.body.has_type for f in new.values()):
            result = infer_type(result)  # as TVM: a function pass's result is typed again
        return result

    def transform_function(self, fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        raise NotImplementedError(f"{type(self).__name__} does not implement transform_function")
