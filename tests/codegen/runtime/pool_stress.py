"""Stress the native thread pool: `regions` back-to-back parallel regions of 1 to 13 chunks,
each chunk adding one to its counter atomically; prints JSON with the counts it expected and
found. Run as a script (tests/codegen/runtime/test_pool.py runs it in a subprocess, so a hang is a
timeout there, not a stuck suite).

    python tests/codegen/runtime/pool_stress.py REGIONS THREADS
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading

import numpy as np
from llvmlite import ir

from codegen.llvm import JitLibrary
from codegen.llvm.native import I8P, I64, STATE, STATE_SIZE, TASK, emit_pool

MAX_CHUNKS = 13


def pool_module() -> str:
    """The pool, a task that counts each chunk it runs, and a driver running the regions
    (the chunk count of region r is r % MAX_CHUNKS + 1)."""
    module = ir.Module("pool_stress")
    pool = emit_pool(module)
    task = ir.Function(module, TASK, "count_chunk")
    b = ir.IRBuilder(task.append_basic_block("entry"))
    counts = b.bitcast(task.args[0], I64.as_pointer())
    b.atomic_rmw("add", b.gep(counts, [task.args[1]]), ir.Constant(I64, 1), "monotonic")
    b.ret_void()
    drive = ir.Function(module, ir.FunctionType(ir.VoidType(), [STATE, I8P, I64]), "drive")
    state, data, regions = drive.args
    entry, loop, body, done = (drive.append_basic_block(n) for n in ("e", "l", "b", "d"))
    b = ir.IRBuilder(entry)
    r = b.alloca(I64)
    b.store(ir.Constant(I64, 0), r)
    b.branch(loop)
    b.position_at_end(loop)
    b.cbranch(b.icmp_unsigned("<", b.load(r), regions), body, done)
    b.position_at_end(body)
    n = b.add(b.urem(b.load(r), ir.Constant(I64, MAX_CHUNKS)), ir.Constant(I64, 1))
    b.call(pool.parallel, [state, task, data, n])
    b.store(b.add(b.load(r), ir.Constant(I64, 1)), r)
    b.branch(loop)
    b.position_at_end(done)
    b.ret_void()
    return str(module)


def run(regions: int, threads: int) -> dict[str, list[int]]:
    library = JitLibrary(pool_module())
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    counts = np.zeros(MAX_CHUNKS, dtype=np.int64)
    worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(library.address("egc_worker"))
    shutdown = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(library.address("egc_shutdown"))
    drive = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        library.address("drive")
    )
    pool = [
        threading.Thread(target=worker, args=(state.ctypes.data,), daemon=True)
        for _ in range(threads - 1)
    ]
    for t in pool:
        t.start()
    drive(state.ctypes.data, counts.ctypes.data, regions)
    shutdown(state.ctypes.data)
    for t in pool:
        t.join()
    expected = [sum(1 for r in range(regions) if r % MAX_CHUNKS + 1 > c) for c in range(MAX_CHUNKS)]
    return {"expected": expected, "found": counts.tolist()}


if __name__ == "__main__":
    print(json.dumps(run(int(sys.argv[1]), int(sys.argv[2]))))
