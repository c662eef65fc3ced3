"""PassContext: the configuration a `with` block gives every pass run inside it.

Opt level, required and disabled passes, typed config and instruments: configuration only.
What a run did (history, typed reports) is a PassRun (run.py), opened by the outermost block.
The current context is the top of a thread-local stack; each thread starts with its own
default context. `derive(...)` makes a nested context that keeps everything it does not
override, so nested builds (measured placement, profiling) run as the user asked.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from egraph_ir.errors import ConfigError
from egraph_ir.module import IRModule

from .config import config_option
from .info import PassInfo
from .instrument import PassInstrument
from .names import check_pass_names
from .run import PassRun, close_run, in_block, open_run

log = logging.getLogger(__name__)
_local = threading.local()


def _stack() -> list[PassContext]:
    if not hasattr(_local, "stack"):
        default = PassContext()
        default.is_default = True
        _local.stack = [default]
    return _local.stack


def _instrument_list(instruments: object) -> list[PassInstrument]:
    """The instruments as a list, or a ConfigError naming what is not one."""
    if isinstance(instruments, str | bytes | PassInstrument) or not isinstance(
        instruments, Iterable
    ):
        raise ConfigError(f"instruments must be a list of PassInstruments, got {instruments!r}")
    items = list(instruments)
    for inst in items:
        if not isinstance(inst, PassInstrument):
            raise ConfigError(
                f"instruments must be PassInstruments; got {inst!r} ({type(inst).__name__})"
            )
    return items


class PassContext:
    """Configuration of the passes run in a `with PassContext(...):` block."""

    def __init__(
        self,
        opt_level: int = 2,
        required_pass: Sequence[str] = (),
        disabled_pass: Sequence[str] = (),
        config: Mapping[str, Any] | None = None,
        instruments: Sequence[PassInstrument] = (),
    ) -> None:
        if not isinstance(opt_level, int) or not 0 <= opt_level <= 4:
            raise ConfigError(f"opt_level must be an int from 0 to 4, got {opt_level!r}")
        for what, names in (("required_pass", required_pass), ("disabled_pass", disabled_pass)):
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"{what} must be a list of pass names, got {names!r}")
            check_pass_names(what, names, warn=what == "disabled_pass")
        self.opt_level = opt_level
        self.required_pass = tuple(required_pass)
        self.disabled_pass = tuple(disabled_pass)
        self.config = {k: config_option(k).check(v) for k, v in (config or {}).items()}
        self.instruments: list[PassInstrument] = _instrument_list(instruments)
        self.is_default = False  # the thread's own context (no `with` block)
        self._opened: PassRun | None = None  # the run this block opened, if outermost
        self._run: PassRun | None = None  # the run this block writes into

    def derive(self, **overrides: Any) -> PassContext:
        """A copy of this configuration with some fields replaced; `config` entries are
        merged into this context's config. Instruments are not inherited (they observe the
        outer block; a derived context runs without them unless given)."""
        known = ("opt_level", "required_pass", "disabled_pass", "config", "instruments")
        unknown = set(overrides) - set(known)
        if unknown:
            raise ConfigError(
                f"derive: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(known)}"
            )
        config = {**self.config, **(overrides.pop("config", None) or {})}
        fields: dict[str, Any] = {
            "opt_level": self.opt_level,
            "required_pass": self.required_pass,
            "disabled_pass": self.disabled_pass,
            "instruments": (),
        }
        fields.update(overrides)
        return PassContext(config=config, **fields)

    @property
    def run(self) -> PassRun:
        """The run record this block writes into (the outermost block's): history and
        typed reports. Not configuration: it is where the passes' results go."""
        return self._run if self._run is not None else PassRun.current()

    # ---------------------------------------------------------------- with-block
    @staticmethod
    def current() -> PassContext:
        """The innermost active context of this thread (a default one if none is active)."""
        return _stack()[-1]

    def __enter__(self) -> PassContext:
        self._enter_instruments(self.instruments)
        _stack().append(self)
        if not in_block():
            self._opened = open_run()
        self._run = PassRun.current()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._exit_instruments()
        finally:
            stack = _stack()
            in_order = bool(stack) and stack[-1] is self
            if self in stack[1:]:
                stack.remove(self)  # never leave a stale current context behind
            if self._opened is not None:
                close_run(self._opened)
                if self._opened.records or self._opened.counters:
                    log.info("pass reports:\n%s", self._opened.render())
                self._opened = None
        if not in_order and exc[0] is None:
            raise ConfigError(
                "PassContext exited out of order: the innermost `with` block must end first"
            )

    def _enter_instruments(self, instruments: Iterable[PassInstrument]) -> None:
        """Call enter_pass_ctx in order; on an error, exit the ones entered and clear all."""
        entered: list[PassInstrument] = []
        for inst in instruments:
            try:
                inst.enter_pass_ctx()
            except BaseException:
                self.instruments = []
                for done in entered:
                    done.exit_pass_ctx()
                raise
            entered.append(inst)

    def _exit_instruments(self) -> None:
        """Call exit_pass_ctx in order; on an error, clear the instruments and propagate."""
        try:
            for inst in self.instruments:
                inst.exit_pass_ctx()
        except BaseException:
            self.instruments = []
            raise

    def override_instruments(self, instruments: Sequence[PassInstrument] | None) -> None:
        """Replace the instruments (None: none): the old ones exit, then the new ones enter."""
        new = _instrument_list(instruments or ())
        self._exit_instruments()
        self.instruments = new
        self._enter_instruments(self.instruments)

    # ---------------------------------------------------------------- queries
    def get_config(self, key: str) -> Any:
        """The configured value of a registered key, or its default."""
        option = config_option(key)
        return self.config.get(key, option.default)

    def pass_enabled(self, info: PassInfo) -> bool:
        """disabled_pass beats required_pass, which beats the opt level."""
        if info.name in self.disabled_pass:
            return False
        if info.name in self.required_pass:
            return True
        return self.opt_level >= info.opt_level

    def bisect_allows(self, info: PassInfo) -> bool:
        """Count an optional pass against pass.bisect_limit; False once the limit is spent."""
        if info.always_run:
            return True
        reached = PassRun.current().optional_passes
        reached.append(info.name)
        limit = self.get_config("pass.bisect_limit")
        if 0 <= limit < len(reached):
            log.warning(
                "bisect: skipping pass #%d '%s' (pass.bisect_limit=%d)",
                len(reached),
                info.name,
                limit,
            )
            return False
        return True

    # ---------------------------------------------------------------- instrument points
    def instrument_before(self, mod: IRModule, info: PassInfo) -> bool:
        """should_run of every instrument (unless the pass is required), then run_before."""
        should_run = True
        if info.name not in self.required_pass:
            for inst in self.instruments:
                should_run = bool(inst.should_run(mod, info)) and should_run
        if should_run:
            for inst in self.instruments:
                inst.run_before_pass(mod, info)
        return should_run

    def instrument_after(self, mod: IRModule, info: PassInfo) -> None:
        for inst in self.instruments:
            inst.run_after_pass(mod, info)

    def instrument_failed(self, mod: IRModule, info: PassInfo) -> None:
        """A pass that had run_before_pass raised: instruments close what they opened."""
        for inst in self.instruments:
            inst.run_failed_pass(mod, info)
