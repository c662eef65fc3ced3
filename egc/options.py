"""What `egc compile` was asked, typed: the job's options (JobOptions) and the request
around them (CompileRequest). Light on purpose (standard library only): the compile
cache keys a request before the compiler is imported, and nothing below the command
line reads argparse (egc/cli/args.py builds these from it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class JobOptions:
    """How the job compiles and what it checks."""

    opt_level: int = 2  # PassContext's default, the command line's too
    rules: list[str] = field(default_factory=list)  # extra rule files, run after the standard
    disabled: list[str] = field(default_factory=list)
    print_ir_after: list[str] = field(default_factory=list)
    check: bool = False
    repeats: int = 0  # timed runs (0: none)
    seed: int = 0
    config: dict[str, Any] = field(default_factory=dict)  # PassContext config keys
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # symbolic input dims
    # sizes a symbolic program is checked, timed and reported at (--dim; 1 where not given)
    dims: dict[str, int] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)  # external targets to partition for
    place: str | None = None  # "measured" or "model": PlaceTargets instead of first fit


@dataclass(frozen=True)
class CompileRequest:
    """One `egc compile`: the model, the job's options and what is done with the result."""

    model: str
    options: JobOptions
    output: str | None = None  # -o: the executable's file
    json: bool = False  # the report as JSON on stdout
    use_cache: bool = True  # --no-cache turns the compile cache off
    needs_ir: bool = False  # --dot, --egraph-dot, --emit-onnx, --print-ir-after, --time-passes
    runs: bool = False  # --check, --repeats, --profile, --report, --trace or --sign-key

    @property
    def cacheable(self) -> bool:
        """Whether the compile cache may answer (a measured placement differs per run)."""
        return self.use_cache and self.options.place != "measured"


def unwritable(path: str | None) -> str | None:
    """Why a file we will write later cannot be written (its folder is missing, it is a
    folder, the folder takes no files), or None."""
    if not path:
        return None
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        return f"{path}: cannot write (no folder {folder})"
    if Path(path).is_dir():
        return f"{path}: cannot write (a folder)"
    if not os.access(folder, os.W_OK):
        return f"{path}: cannot write (folder {folder} is not writable)"
    return None
