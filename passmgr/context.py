"""PassContext: the configuration a `with` block gives every pass run inside it.

Opt level, required and disabled passes, typed config, instruments, statistics. The current
context is the top of a thread-local stack; each thread starts with its own default context.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from egraph_ir.errors import ConfigError, did_you_mean
from egraph_ir.module import IRModule

from .config import config_option

if TYPE_CHECKING:
    from .instrument import PassInstrument
    from .pass_base import PassInfo

log = logging.getLogger(__name__)
_local = threading.local()


def _stack() -> list[PassContext]:
    if not hasattr(_local, "stack"):
        default = PassContext()
        default.is_default = True
        _local.stack = [default]
    return _local.stack


PASS_NAMES: set[str] = set()  # every pass name defined so far (classes, PassInfos, registry)


def check_pass_names(what: str, names: Sequence[str]) -> None:
    """A name in required_pass / disabled_pass (or --disable) that no pass has is a typo:
    an error with a did-you-mean, rather than a setting that silently does nothing."""
    for name in names:
        if name not in PASS_NAMES:
            raise ConfigError(
                f"{what}: unknown pass '{name}'{did_you_mean(name, PASS_NAMES)}; "
                f"known: {', '.join(sorted(n for n in PASS_NAMES if not n.startswith('_')))}"
            )


def _instrument_list(instruments: object) -> list[PassInstrument]:
    """The instruments as a list, or a ConfigError naming what is not one."""
    from .instrument import PassInstrument

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
            check_pass_names(what, names)
        self.opt_level = opt_level
        self.required_pass = tuple(required_pass)
        self.disabled_pass = tuple(disabled_pass)
        self.config = {k: config_option(k).check(v) for k, v in (config or {}).items()}
        self.instruments: list[PassInstrument] = _instrument_list(instruments)
        self.is_default = False  # the thread's own context: keeps only the latest run's data
        self.statistics: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.history: list[str] = []  # passes run by the latest top-level pass call, in order
        self.running: list[str] = []  # the stack of passes being run (nested Sequentials)
        self.optional_passes: list[str] = []  # optional passes reached, for bisection

    # ---------------------------------------------------------------- with-block
    @staticmethod
    def current() -> PassContext:
        """The innermost active context of this thread (a default one if none is active)."""
        return _stack()[-1]

    def __enter__(self) -> PassContext:
        self._enter_instruments(self.instruments)
        _stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._exit_instruments()
        finally:
            stack = _stack()
            in_order = bool(stack) and stack[-1] is self
            if self in stack[1:]:
                stack.remove(self)  # never leave a stale current context behind
            if self.statistics:
                log.info("pass statistics:\n%s", self.render_statistics())
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
        self.optional_passes.append(info.name)
        limit = self.get_config("pass.bisect_limit")
        if 0 <= limit < len(self.optional_passes):
            log.warning(
                "bisect: skipping pass #%d '%s' (pass.bisect_limit=%d)",
                len(self.optional_passes),
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

    # ---------------------------------------------------------------- statistics
    def bump(self, counter: str, amount: float = 1) -> None:
        """Add to a named counter of the pass now running (e.g. 'rules fired')."""
        owner = self.running[-1] if self.running else "<no pass>"
        self.statistics[owner][counter] += amount

    def record(self, counter: str, value: float) -> None:
        """Set a named value of the pass now running (e.g. 'e-nodes')."""
        owner = self.running[-1] if self.running else "<no pass>"
        self.statistics[owner][counter] = value

    def render_statistics(self) -> str:
        lines = []
        for name, counters in self.statistics.items():
            for counter, value in counters.items():
                shown = int(value) if float(value).is_integer() else round(value, 6)
                lines.append(f"{name:>24}  {shown:>12}  {counter}")
        return "\n".join(lines)
