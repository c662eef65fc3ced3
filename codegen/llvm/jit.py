"""JIT: optimise modules at O3 for the host CPU (name and features) and load them with MCJIT.

Kernels carry "prefer-vector-width"="512": LLVM picks 256-bit vectors on this CPU otherwise,
which halves compute-bound loops (research/perf/FINDINGS.md §4). A build's code comes in
several modules: the first is compiled here while helper processes (objcompile.py, one per
extra core, started once and kept) turn the others into object files, which are then linked
into the same engine. llvmlite holds one lock around LLVM, so threads could not do this.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import llvmlite.binding as llvm

from .objcompile import host_target_machine, init, optimise, read_message, to_object, write_message

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

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        write_message(self.proc.stdin, text.encode())  # type: ignore[arg-type]

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


_HELPERS: list[_Helper] = []
_LOCK = threading.Lock()


def start_helpers(count: int) -> None:
    """Start (once) the helper processes a build will use; they start while passes run.
    Never more than the cores this process may use, less one (it compiles a module too):
    64 helpers on 2 cores held 3.5 GB and compiled nothing faster."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    count = min(count, max(1, (cores or 1) - 1))
    with _LOCK:
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


def _send(texts: list[str]) -> list[tuple[str, _Helper | None]]:
    """Hand each text to a helper (None: compile it here, later)."""
    start_helpers(len(texts))
    sent: list[tuple[str, _Helper | None]] = []
    for k, text in enumerate(texts):
        helper = _HELPERS[k] if k < len(_HELPERS) else None
        try:
            if helper is not None:
                helper.send(text)
        except OSError:
            helper = None
        sent.append((text, helper))
    return sent


def _collect(sent: list[tuple[str, _Helper | None]]) -> list[bytes]:
    """The object files, in order; a failed helper's text compiles in this process."""
    out = []
    for text, helper in sent:
        try:
            if helper is None:
                raise RuntimeError("no helper")
            out.append(helper.receive())
        except (RuntimeError, OSError) as exc:
            if helper is not None:
                log.warning("compile helper failed (%s); compiling in this process", exc)
                helper.close()
            out.append(to_object(text))
    return out


class JitLibrary:
    """Compiled modules in one engine; `address(name)` finds a function. Every module is
    kept as an object file (`objects`), so a library can be saved and loaded again
    (`from_objects`) without LLVM optimising or generating code."""

    def __init__(self, ir_text: str | list[str]) -> None:
        init()
        texts = [ir_text] if isinstance(ir_text, str) else ir_text
        t0 = time.perf_counter()
        sent = _send(texts[1:])
        tm = host_target_machine()
        mod = optimise(texts[0], tm)
        self.optimized_ir = str(mod)  # of the first module (the others arrive as objects)
        first = bytes(tm.emit_object(mod))
        t1 = time.perf_counter()
        self.objects = [first, *_collect(sent)]
        self._load(self.objects)
        self.seconds = {"optimise": t1 - t0, "jit": time.perf_counter() - t1}

    @classmethod
    def from_objects(cls, objects: list[bytes]) -> JitLibrary:
        """A library of object files made by this class (relocated here, not recompiled)."""
        init()
        lib = cls.__new__(cls)
        t0 = time.perf_counter()
        lib.objects, lib.optimized_ir = list(objects), ""
        lib._load(lib.objects)
        lib.seconds = {"jit": time.perf_counter() - t0}
        return lib

    def _load(self, objects: list[bytes]) -> None:
        self.tm = host_target_machine()
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.tm)
        for data in objects:
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(data))
        self.engine.finalize_object()

    def address(self, name: str) -> int:
        address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(name)
        return int(address)
