"""JIT: optimise modules at O3 for the host CPU (name and features) and load them with MCJIT.

Kernels carry "prefer-vector-width"="512": LLVM picks 256-bit vectors on this CPU otherwise,
which halves compute-bound loops (research/perf/FINDINGS.md §4). A build's code comes in
several modules: the first is compiled here while helper processes (objcompile.py, one per
extra core, started once and kept) turn the others into object files, which are then linked
into the same engine. llvmlite holds one lock around LLVM, so threads could not do this.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import llvmlite.binding as llvm

from ..loop_ir import MAX_SIZES
from ..options import default_threads
from .objcompile import (
    QUICK,
    host_target_machine,
    init,
    optimise,
    read_message,
    to_object,
    write_message,
)
from .sizes import SIZES_GLOBAL

log = logging.getLogger(__name__)

__all__ = ["JitLibrary", "host_target_machine"]


class _Helper:
    """One compile-server process."""

    def __init__(self) -> None:
        script = Path(__file__).with_name("objcompile.py")
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.served = 0  # modules sent; past HELPER_MODULES the helper is replaced

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        write_message(self.proc.stdin, text.encode())  # type: ignore[arg-type]
        self.served += 1

    def receive(self) -> bytes:
        assert self.proc.stdout is not None
        message = read_message(self.proc.stdout)  # type: ignore[arg-type]
        if message is None or message[1]:
            raise RuntimeError(message[0].decode() if message else "helper exited")
        return message[0]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


HELPER_MODULES = 200  # modules a helper compiles before it is replaced (about 25 MB kept)
_HELPERS: list[_Helper] = []
_LOCK = threading.Lock()


def start_helpers(count: int) -> None:
    """Start (once) the helper processes a build will use; they start while passes run.
    Never more than the cores this process may use (64 helpers on 2 cores held 3.5 GB and
    compiled nothing faster). LLVM's optimisation pipeline keeps about 0.1 MB for every
    module it runs on (inside llvmlite's pass manager, not freed on close), so modules
    compile only in helpers, and a helper is replaced after HELPER_MODULES modules: the
    building process stays flat over thousands of builds."""
    count = min(count, default_threads())
    with _LOCK:
        for h in _HELPERS:
            if h.served >= HELPER_MODULES:
                h.close()
        _HELPERS[:] = [h for h in _HELPERS if h.proc.poll() is None]
        while len(_HELPERS) < count:
            try:
                _HELPERS.append(_Helper())
            except OSError as exc:  # pragma: no cover - no way to start a process
                log.warning("no compile helper (%s): modules compile in this process", exc)
                return


@atexit.register
def _stop_helpers() -> None:
    for h in _HELPERS:
        h.close()


class Compilation:
    """Module texts compiled as they are emitted: each goes to an idle helper the moment
    it exists, so LLVM optimises one module while Python emits the next. A helper holds
    one text at a time: writing it a second while it writes a large object file back to
    a full pipe would leave both processes waiting on each other."""

    def __init__(self, modules: int, cache: dict[str, bytes] | None = None) -> None:
        start_helpers(modules)
        self.cache = cache  # object code by module text digest, kept by the caller
        self.texts: dict[int, str] = {}
        self.objects: dict[int, bytes] = {}
        self.busy: dict[_Helper, int] = {}  # helper -> the module it compiles
        self.compiled = 0  # modules LLVM compiled (not found in the cache)

    def send(self, index: int, text: str) -> None:
        """Module `index` to an idle helper (waiting for the oldest when none is idle),
        or compiled here when there is no helper."""
        self.texts[index] = text
        if self.cache is not None and (known := self.cache.get(_digest(text))) is not None:
            self.objects[index] = known
            return
        if self.busy and len(self.busy) == len(_HELPERS):
            self._collect(next(iter(self.busy)))
        idle = [h for h in _HELPERS if h not in self.busy]
        try:
            if not idle:
                raise OSError("no helper")
            idle[0].send(text)
            self.busy[idle[0]] = index
        except OSError:
            self._done(index, to_object(text))

    def _collect(self, helper: _Helper) -> None:
        index = self.busy.pop(helper)
        try:
            self._done(index, helper.receive())
        except (RuntimeError, OSError) as exc:
            log.warning("compile helper failed (%s); compiling in this process", exc)
            helper.close()
            self._done(index, to_object(self.texts[index]))

    def _done(self, index: int, data: bytes) -> None:
        self.compiled += 1
        self.objects[index] = data
        if self.cache is not None:
            self.cache[_digest(self.texts[index])] = data

    def finish(self) -> list[bytes]:
        """Every module's object file, in index order."""
        for helper in list(self.busy):
            self._collect(helper)
        return [self.objects[k] for k in sorted(self.objects)]

    def abandon(self) -> None:
        """The build failed between sending and collecting: stop the helpers still
        compiling, so no later build reads their answer as its own (start_helpers
        replaces them)."""
        for helper in self.busy:
            helper.close()
        self.busy.clear()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _compile(texts: list[str]) -> list[bytes]:
    """Object files for LLVM IR texts, in order."""
    compilation = Compilation(len(texts))
    for index, text in enumerate(texts):
        compilation.send(index, text)
    return compilation.finish()


class JitLibrary:
    """Compiled modules in one engine; `address(name)` finds a function. Every module is
    kept as an object file (`objects`), so a library can be saved and loaded again
    (`from_objects`) without LLVM optimising or generating code."""

    def __init__(self, ir_text: str | list[str] | Compilation) -> None:
        """Compile module texts, or finish a Compilation the emitter fed as it went."""
        init()
        t0 = time.perf_counter()
        if isinstance(ir_text, Compilation):
            self.objects = ir_text.finish()
            texts = [ir_text.texts[k] for k in sorted(ir_text.texts)]
        else:
            texts = [ir_text] if isinstance(ir_text, str) else ir_text
            self.objects = _compile(texts)
        self._texts: list[str] = texts
        self._optimized: str | None = None
        t1 = time.perf_counter()
        self._load(self.objects)
        self.seconds = {"optimise": t1 - t0, "jit": time.perf_counter() - t1}

    @property
    def optimized_ir(self) -> str:
        """The kernels' modules after LLVM's optimisation (the glue module left out), made
        here when first asked for."""
        if self._optimized is None:
            tm = host_target_machine()
            kernels = [t for t in self._texts if not t.startswith(QUICK)]
            self._optimized = "\n".join(
                str(optimise(t, tm, llvm.create_context())) for t in kernels
            )
        return self._optimized

    @classmethod
    def from_objects(cls, objects: list[bytes]) -> JitLibrary:
        """A library of object files made by this class (relocated here, not recompiled)."""
        init()
        lib = cls.__new__(cls)
        t0 = time.perf_counter()
        lib.objects, lib._texts, lib._optimized = list(objects), [], None
        lib._load(lib.objects)
        lib.seconds = {"jit": time.perf_counter() - t0}
        return lib

    def _load(self, objects: list[bytes]) -> None:
        self._sizes: ctypes.Array[ctypes.c_int64] | None = None  # egc_sizes, once looked up
        self.tm = host_target_machine()
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.tm)
        for data in objects:
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        self.engine.finalize_object()

    def write_sizes(self, values: Sequence[int]) -> None:
        """Give the kernels of a symbolic program's specialisation its sizes: the values
        of `egc_sizes` (codegen/llvm/sizes.py), which its object code only declares."""
        table = self._sizes
        if table is None:  # found once: a program built for every size writes it per run
            address = self.engine.get_global_value_address(SIZES_GLOBAL)
            if not address:
                raise KeyError(SIZES_GLOBAL)
            table = self._sizes = (ctypes.c_int64 * MAX_SIZES).from_address(address)
        table[: len(values)] = [int(v) for v in values]

    def address(self, name: str) -> int:
        address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(name)
        return int(address)
