"""passmgr: the PassContext-driven pass manager and the standard passes (layer 2).

The model is TVM's pass infrastructure (PassInfo, PassContext, module/function/sequential
passes, a registry, decorators, instruments), plus change tracking with FixedPoint/Repeat,
textual pipelines, bisection (`pass.bisect_limit`) and a run log (PassRun) of typed reports,
kept apart from the configuration (PassContext).
"""

from __future__ import annotations

import importlib
from typing import Any

from egraph_ir.errors import require

from . import passes
from .bisect import BisectResult, bisect_pipeline
from .config import ConfigOption, list_configs, register_config
from .context import PassContext
from .decorators import function_pass, module_pass
from .instrument import (
    PassInstrument,
    PassTimingInstrument,
    PrintIRAfter,
    PrintIRAfterChange,
    PrintIRBefore,
    VerifyEach,
    pass_instrument,
    verify_module,
)
from .names import UnknownPassWarning
from .pass_base import FunctionPass, ModulePass, Pass, PassInfo, PassResult, module_changed
from .pipeline_text import parse_pipeline
from .registry import get_pass, list_passes, register_pass
from .run import PassReport, PassRun, count, record, separate_run
from .sequential import FixedPoint, FixedPointReport, Repeat, Sequential
from .standard import standard_pipeline


def override_instruments(instruments: list[PassInstrument] | None) -> None:
    """Replace the instruments of the current context (old ones exit, new ones enter;
    None: no instruments)."""
    PassContext.current().override_instruments(instruments)


__all__ = [
    "UnknownPassWarning",
    "testing",
    "BisectResult",
    "ConfigOption",
    "FixedPoint",
    "FixedPointReport",
    "bisect_pipeline",
    "count",
    "record",
    "separate_run",
    "standard_pipeline",
    "FunctionPass",
    "ModulePass",
    "Pass",
    "PassContext",
    "PassInfo",
    "PassInstrument",
    "PassReport",
    "PassResult",
    "PassRun",
    "PassTimingInstrument",
    "PrintIRAfter",
    "PrintIRAfterChange",
    "PrintIRBefore",
    "Repeat",
    "Sequential",
    "VerifyEach",
    "function_pass",
    "get_pass",
    "list_configs",
    "list_passes",
    "module_changed",
    "module_pass",
    "override_instruments",
    "parse_pipeline",
    "pass_instrument",
    "passes",
    "register_config",
    "register_pass",
    "verify_module",
]


def __getattr__(name: str) -> Any:
    """`passmgr.testing` loads hypothesis (~0.1 s): imported on first use only."""
    if name == "testing":
        require("hypothesis", "passmgr.testing")
        return importlib.import_module(f"{__name__}.testing")
    raise AttributeError(f"module 'passmgr' has no attribute '{name}'")
