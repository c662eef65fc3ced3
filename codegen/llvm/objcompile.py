"""LLVM IR text to an object file, at O3 for the host CPU — also a small compile server.

llvmlite serialises every call into LLVM behind one lock, so threads cannot compile two
modules at once. To use the other cores, `codegen.llvm.jit` runs this file as a script in
helper processes: each reads IR texts from stdin and writes object files to stdout
(8-byte little-endian length, then the bytes; a negative length carries an error message).
This file imports nothing but llvmlite so that a helper starts in about 0.1 s.
"""

from __future__ import annotations

import struct
import sys
from typing import Any, BinaryIO

import llvmlite.binding as llvm

_READY = False


def init() -> None:
    """`llvm.initialize()` raises in llvmlite 0.50: only the native target and asm printer."""
    global _READY
    if not _READY:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _READY = True


# The first line of a module that is only glue (calls of kernels compiled elsewhere):
# compiled without optimisation, 4x faster (26 ms against 117 ms for a decoder's), while
# what it runs, a few calls per kernel, costs the same.
QUICK = "; egc: glue, compiled unoptimised"


def host_target_machine(opt: int = 3) -> Any:
    init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=opt,
        jit=True,
    )


def optimise(ir_text: str, tm: Any, context: Any = None) -> Any:
    """Parse and run the O3 pipeline (vectorisers, interleaving, unrolling). Unrolling
    doubles compile time, but LLVM 22 without it vectorises a 10-element maxnum reduction
    that skips its last two elements (tests/codegen/test_reductions.py keeps that caught)."""
    mod = llvm.parse_assembly(ir_text, context=context)
    mod.verify()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_interleaving = True
    options.loop_unrolling = True
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(mod, builder)
    if "vector-function-abi-variant" in ir_text:  # table readers (codegen/llvm/lookup.py)
        late = llvm.create_new_module_pass_manager()
        late.add_always_inliner_pass()
        late.add_instruction_combine_pass()
        late.run(mod, builder)
    return mod


def to_object(ir_text: str) -> bytes:
    if ir_text.startswith(QUICK):
        tm = host_target_machine(opt=0)
        mod = llvm.parse_assembly(ir_text, context=llvm.create_context())
        mod.verify()
        return bytes(tm.emit_object(mod))
    tm = host_target_machine()
    return bytes(tm.emit_object(optimise(ir_text, tm, llvm.create_context())))


def write_message(stream: BinaryIO, payload: bytes, error: bool = False) -> None:
    stream.write(struct.pack("<q", -len(payload) if error else len(payload)))
    stream.write(payload)
    stream.flush()


def read_message(stream: BinaryIO) -> tuple[bytes, bool] | None:
    """(payload, is_error), or None at end of stream."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<q", head)
    payload = stream.read(abs(size))
    return payload, size < 0


def serve(source: BinaryIO, sink: BinaryIO) -> None:
    while (message := read_message(source)) is not None:
        try:
            write_message(sink, to_object(message[0].decode()))
        except Exception as exc:  # reported to the parent, which compiles in-process
            write_message(sink, f"{type(exc).__name__}: {exc}".encode(), error=True)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
