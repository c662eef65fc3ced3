"""The native runtime in LLVM IR: a thread pool, parallel launches, BLAS calls and the
entry functions that run a whole segment of the graph in one call.

The pool is a few dozen lines of IR rather than an OpenMP runtime because of one property
OpenMP's fork-join cannot give: the caller never waits for a worker that has not started.
Work is cut into chunks that any thread claims with a compare-and-swap on one word holding
(generation << 32 | next chunk); the caller claims chunks too and then waits only for
chunks already claimed. When another process holds a core, a descheduled worker costs
nothing — the caller finishes the region alone — where a barrier would wait a scheduler
time slice (milliseconds) per region. Idle workers spin briefly (about 50 us), then sleep
on a futex, so an idle executable uses no CPU.

State (an int64 array owned by the runtime): see the STATE_* indices.

The protocol, and why no chunk runs twice and no wait can miss its end:

1. A region of generation g starts by storing (g << 32 | CLOSED) in STATE_WORD. From then
   on no claim of generation g - 1 can succeed: a claim is a compare-and-swap on the exact
   word it read, and that word is gone; nor of g, since CLOSED is above every chunk count.
2. Only then are the task, its data, the chunk count n and DONE = 0 written, and then the
   word opened: (g << 32 | 0). A claim that wins chunk c of g therefore read the word after
   it was opened, and its later (acquire) loads of the task, data and n see generation g's.
3. A claim of chunk c < n runs it and adds one to DONE; chunk indices only grow within a
   generation, so each of 0 .. n-1 is won exactly once and DONE reaches exactly n.
4. The caller claims too, then waits for DONE == n; it starts the next region only after,
   so no chunk of g is running when step 1 of g + 1 closes the word.
5. A worker treats a generation as new only once its word is open, so it neither skips an
   opened region nor counts a closed one as served.

Before this order (task, data and n written first, the word bumped last) a worker still
inside a claim of g - 1 could read the new n, win the swap on the unchanged old word, run
the new task with its old chunk index and add to the new DONE: a chunk ran twice and the
caller's wait for DONE == n never ended.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir

STATE_WORD, STATE_DONE, STATE_FN, STATE_DATA, STATE_N = 0, 1, 2, 3, 4
STATE_SLEEPERS, STATE_WAKE, STATE_SHUTDOWN = 5, 6, 7
STATE_SERIAL_UNTIL, STATE_CONTENDED = 8, 9  # cycle count until which regions run alone; times
STATE_BACKOFF = 10  # the current serial period in cycles (doubles while contention lasts)
SERIAL_MIN, SERIAL_MAX = 30_000_000, 1_000_000_000  # serial period: ~10 ms first, ~0.4 s most
WAIT_SLACK = 300_000  # cycles (~0.1 ms) of waiting always tolerated: a late wake-up, not a
# descheduled worker (that costs a scheduler slice, milliseconds)
STATE_SIZE = 16  # int64 fields (two cache lines would be kinder; one suffices for 2 cores)
SPIN_CYCLES = 600_000  # ~0.2 ms: how long an idle worker spins before it sleeps (pause
# costs 10-140 cycles depending on the CPU, so the limit is measured in cycles, not pauses)
SYS_FUTEX, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 202, 128, 129
CHUNK_MASK = 0xFFFFFFFF  # the low half of STATE_WORD: the next chunk to claim
CLOSED = CHUNK_MASK  # that half while a region is being set up: nothing can be claimed

I64, I32, I8P = ir.IntType(64), ir.IntType(32), ir.IntType(8).as_pointer()
STATE = I64.as_pointer()
TASK = ir.FunctionType(ir.VoidType(), [I8P, I64])  # fn(data, chunk)


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


@dataclass
class Pool:
    """The pool's functions in one module."""

    claim: ir.Function
    worker: ir.Function
    parallel: ir.Function
    shutdown: ir.Function


class _Builder:
    """Helpers shared by the pool functions."""

    def __init__(self, module: ir.Module) -> None:
        self.module = module
        self.syscall = ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        self.pause = None
        if platform.machine() in ("x86_64", "AMD64", "i686"):
            self.pause = ir.Function(
                module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause"
            )

    def field(self, b: ir.IRBuilder, state: ir.Value, index: int) -> ir.Value:
        return b.gep(state, [c64(index)], inbounds=True)

    def wake_word(self, b: ir.IRBuilder, state: ir.Value) -> ir.Value:
        return b.bitcast(self.field(b, state, STATE_WAKE), I32.as_pointer())

    def load(
        self, b: ir.IRBuilder, state: ir.Value, index: int, order: str = "acquire"
    ) -> ir.Value:
        return b.load_atomic(self.field(b, state, index), order, 8)

    def relax(self, b: ir.IRBuilder) -> None:
        if self.pause is not None:
            b.call(self.pause, [])


def _blocks(fn: ir.Function, *names: str) -> list[ir.Block]:
    return [fn.append_basic_block(name) for name in names]


def _cycle_counter(module: ir.Module) -> ir.Function:
    """llvm.readcyclecounter (the TSC on x86), declared once per module."""
    name = "llvm.readcyclecounter"
    if name in module.globals:
        found = module.globals[name]
        assert isinstance(found, ir.Function)
        return found
    return ir.Function(module, ir.FunctionType(I64, []), name)


def emit_pool(module: ir.Module) -> Pool:
    h = _Builder(module)
    claim = _emit_claim(module, h)
    return Pool(
        claim,
        _emit_worker(module, h, claim),
        _emit_parallel(module, h, claim),
        _emit_shutdown(module, h),
    )


def _emit_claim(module: ir.Module, h: _Builder) -> ir.Function:
    """egc_claim(state, gen): run chunks of generation `gen` until none is left."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [STATE, I64]), "egc_claim")
    state, gen = fn.args
    top, check, take, run, out = _blocks(fn, "top", "check", "take", "run", "out")
    b = ir.IRBuilder(top)
    b.branch(check)
    b.position_at_end(check)
    word = h.load(b, state, STATE_WORD)
    same = b.icmp_unsigned("==", b.lshr(word, c64(32)), gen)
    b.cbranch(same, take, out)
    b.position_at_end(take)
    chunk = b.and_(word, c64(CHUNK_MASK))  # CLOSED is above every n
    n = h.load(b, state, STATE_N)
    b.cbranch(b.icmp_unsigned("<", chunk, n), run, out)
    b.position_at_end(run)
    pair = b.cmpxchg(h.field(b, state, STATE_WORD), word, b.add(word, c64(1)), "acq_rel", "acquire")
    won = b.extract_value(pair, 1)
    go = fn.append_basic_block("go")
    b.cbranch(won, go, check)
    b.position_at_end(go)
    task = b.inttoptr(h.load(b, state, STATE_FN), TASK.as_pointer())
    data = b.inttoptr(h.load(b, state, STATE_DATA), I8P)
    b.call(task, [data, chunk])
    b.atomic_rmw("add", h.field(b, state, STATE_DONE), c64(1), "release")
    b.branch(check)
    b.position_at_end(out)
    b.ret_void()
    return fn


def _emit_worker(module: ir.Module, h: _Builder, claim: ir.Function) -> ir.Function:
    """egc_worker(state): serve generations until shutdown; spin, then sleep on a futex."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [STATE]), "egc_worker")
    (state,) = fn.args
    names = ("entry", "loop", "alive", "work", "idle", "spin", "sleep", "wait", "woke", "exit")
    entry, loop, alive, work, idle, spin, sleep, wait, woke, exit_ = _blocks(fn, *names)
    b = ir.IRBuilder(entry)
    seen = b.alloca(I64)
    spins = b.alloca(I64)  # the cycle count when the worker last had work
    b.store(c64(0), seen)
    clock = _cycle_counter(module)
    b.store(b.call(clock, []), spins)
    b.branch(loop)

    b.position_at_end(loop)
    stop = h.load(b, state, STATE_SHUTDOWN)
    b.cbranch(b.icmp_unsigned("!=", stop, c64(0)), exit_, alive)

    b.position_at_end(alive)
    current = h.load(b, state, STATE_WORD)
    gen = b.lshr(current, c64(32))
    is_open = b.icmp_unsigned("!=", b.and_(current, c64(CHUNK_MASK)), c64(CLOSED))
    new = b.and_(b.icmp_unsigned("!=", gen, b.load(seen)), is_open)
    b.cbranch(new, work, idle)

    b.position_at_end(work)
    b.store(gen, seen)
    b.call(claim, [state, gen])
    b.store(b.call(clock, []), spins)
    b.branch(loop)

    b.position_at_end(idle)
    quiet_for = b.sub(b.call(clock, []), b.load(spins))
    b.cbranch(b.icmp_unsigned("<", quiet_for, c64(SPIN_CYCLES)), spin, sleep)

    b.position_at_end(spin)
    h.relax(b)
    b.branch(loop)

    b.position_at_end(sleep)
    wake = h.wake_word(b, state)
    ticket = b.load_atomic(wake, "seq_cst", 4)
    b.atomic_rmw("add", h.field(b, state, STATE_SLEEPERS), c64(1), "seq_cst")
    again = b.lshr(h.load(b, state, STATE_WORD, "seq_cst"), c64(32))
    stopping = b.icmp_unsigned("!=", h.load(b, state, STATE_SHUTDOWN, "seq_cst"), c64(0))
    fresh = b.or_(b.icmp_unsigned("!=", again, b.load(seen)), stopping)
    b.cbranch(fresh, woke, wait)

    b.position_at_end(wait)
    null = ir.Constant(I8P, None)
    futex = [
        c64(SYS_FUTEX),
        b.ptrtoint(wake, I64),
        c64(FUTEX_WAIT_PRIVATE),
        b.zext(ticket, I64),
        null,
    ]
    b.call(h.syscall, futex)
    b.branch(woke)

    b.position_at_end(woke)
    b.atomic_rmw("sub", h.field(b, state, STATE_SLEEPERS), c64(1), "seq_cst")
    b.store(b.call(clock, []), spins)
    b.branch(loop)

    b.position_at_end(exit_)
    b.ret_void()
    return fn


def _wake_all(b: ir.IRBuilder, h: _Builder, state: ir.Value, fn: ir.Function) -> None:
    """Wake sleeping workers (only when some sleep: the common case is a spinning pool)."""
    sleepers = h.load(b, state, STATE_SLEEPERS, "seq_cst")
    wake = fn.append_basic_block("wake")
    done = fn.append_basic_block("woken")
    b.cbranch(b.icmp_unsigned("!=", sleepers, c64(0)), wake, done)
    b.position_at_end(wake)
    word = h.wake_word(b, state)
    b.atomic_rmw("add", word, ir.Constant(I32, 1), "seq_cst")
    args = [c64(SYS_FUTEX), b.ptrtoint(word, I64), c64(FUTEX_WAKE_PRIVATE), c64(1 << 30)]
    b.call(h.syscall, args)
    b.branch(done)
    b.position_at_end(done)


def _emit_parallel(module: ir.Module, h: _Builder, claim: ir.Function) -> ir.Function:
    """egc_parallel(state, task, data, n): run task(data, c) for c < n on every thread.

    Contention check: when the caller, done with its own chunks, waits for a worker longer
    than it worked itself (plus WAIT_SLACK), a worker was descheduled — another process
    holds the core — and regions run on the caller alone for a while: SERIAL_MIN cycles,
    doubling (up to SERIAL_MAX) while the probes that follow keep finding contention."""
    fnty = ir.FunctionType(ir.VoidType(), [STATE, TASK.as_pointer(), I8P, I64])
    fn = ir.Function(module, fnty, "egc_parallel")
    state, task, data, n = fn.args
    clock = _cycle_counter(module)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    now = b.call(clock, [])
    until = b.load(h.field(b, state, STATE_SERIAL_UNTIL))
    alone = fn.append_basic_block("alone")
    shared = fn.append_basic_block("shared")
    b.cbranch(b.icmp_unsigned("<", now, until), alone, shared)
    b.position_at_end(alone)
    serial_loop(b, fn, task, data, n)
    b.ret_void()
    b.position_at_end(shared)
    gen = b.add(b.lshr(h.load(b, state, STATE_WORD, "monotonic"), c64(32)), c64(1))
    opened = b.shl(gen, c64(32))
    # close the old generation before touching what its claims read (see the docstring)
    b.store_atomic(b.or_(opened, c64(CLOSED)), h.field(b, state, STATE_WORD), "seq_cst", 8)
    b.store_atomic(b.ptrtoint(task, I64), h.field(b, state, STATE_FN), "release", 8)
    b.store_atomic(b.ptrtoint(data, I64), h.field(b, state, STATE_DATA), "release", 8)
    b.store_atomic(n, h.field(b, state, STATE_N), "release", 8)
    b.store_atomic(c64(0), h.field(b, state, STATE_DONE), "release", 8)
    b.store_atomic(opened, h.field(b, state, STATE_WORD), "seq_cst", 8)
    _wake_all(b, h, state, fn)
    started = b.call(clock, [])
    b.call(claim, [state, gen])
    claimed = b.call(clock, [])
    wait = fn.append_basic_block("wait")
    pause = fn.append_basic_block("pause")
    out = fn.append_basic_block("out")
    contended = fn.append_basic_block("contended")
    finish = fn.append_basic_block("finish")
    b.branch(wait)
    b.position_at_end(wait)
    finished = h.load(b, state, STATE_DONE)
    b.cbranch(b.icmp_unsigned("==", finished, n), out, pause)
    b.position_at_end(pause)
    h.relax(b)
    b.branch(wait)
    b.position_at_end(out)
    ended = b.call(clock, [])
    waited = b.sub(ended, claimed)
    limit = b.add(b.sub(claimed, started), c64(WAIT_SLACK))
    b.cbranch(b.icmp_unsigned(">", waited, limit), contended, finish)
    b.position_at_end(contended)
    backoff_at = h.field(b, state, STATE_BACKOFF)
    period = b.load(backoff_at)
    longer = b.select(
        b.icmp_signed("<", period, c64(SERIAL_MIN)),
        c64(SERIAL_MIN),
        b.shl(period, c64(1)),
    )
    longer = b.select(b.icmp_signed(">", longer, c64(SERIAL_MAX)), c64(SERIAL_MAX), longer)
    b.store(longer, backoff_at)
    b.store(b.add(ended, longer), h.field(b, state, STATE_SERIAL_UNTIL))
    b.atomic_rmw("add", h.field(b, state, STATE_CONTENDED), c64(1), "monotonic")
    b.ret_void()
    b.position_at_end(finish)
    backoff_at = h.field(b, state, STATE_BACKOFF)
    b.store(b.ashr(b.load(backoff_at), c64(1)), backoff_at)  # contention has passed
    b.ret_void()
    return fn


def _emit_shutdown(module: ir.Module, h: _Builder) -> ir.Function:
    """egc_shutdown(state): workers return from egc_worker."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [STATE]), "egc_shutdown")
    (state,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.store_atomic(c64(1), h.field(b, state, STATE_SHUTDOWN), "seq_cst", 8)
    word = h.wake_word(b, state)
    b.atomic_rmw("add", word, ir.Constant(I32, 1), "seq_cst")
    b.call(
        h.syscall, [c64(SYS_FUTEX), b.ptrtoint(word, I64), c64(FUTEX_WAKE_PRIVATE), c64(1 << 30)]
    )
    b.ret_void()
    return fn


@contextmanager
def counted_loop(
    b: ir.IRBuilder, fn: ir.Function, count: ir.Value, name: str
) -> Iterator[ir.Value]:
    """`with counted_loop(b, fn, n, "x") as i:` emits its body for i in [0, n); the
    builder ends after the loop."""
    pre = b.block
    head, body, done = (fn.append_basic_block(f"{name}.{p}") for p in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(c64(0), pre)
    b.cbranch(b.icmp_unsigned("<", i, count), body, done)
    b.position_at_end(body)
    yield i
    i.add_incoming(b.add(i, c64(1)), b.block)  # the block the body ended in
    b.branch(head)
    b.position_at_end(done)


def serial_loop(
    b: ir.IRBuilder, fn: ir.Function, task: ir.Value, data: ir.Value, n: int | ir.Value
) -> None:
    """task(data, c) for c in [0, n) on this thread."""
    with counted_loop(b, fn, c64(n) if isinstance(n, int) else n, "serial") as i:
        b.call(task, [data, i])
