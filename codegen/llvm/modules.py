"""How a build's kernels are dealt over LLVM modules that compile in parallel (one per
thread), each handed on as soon as it is emitted."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ..loop_ir import Kernel, statements
from .emit import emit_module


def emit_modules(
    kernels: list[Kernel],
    extend: Callable[[ir.Module], None] | None,
    parts: int,
    emitted: Callable[[int, str], None] = lambda index, text: None,
) -> list[str]:
    """The kernels dealt over `parts` modules that compile in parallel; the first also
    holds what `extend` adds and declares the kernels of the others. `emitted(index,
    text)` hears of each module as soon as it is made (the first last): a compiler can
    start on it while the next is emitted."""
    parts = max(1, min(parts, len(kernels) // 4 or 1))
    sizes = [statements(k.body) for k in kernels]  # a proxy for LLVM's work
    loads = [0.0] * parts
    shares: list[list[Kernel]] = [[] for _ in range(parts)]
    for size, k in sorted(zip(sizes, kernels, strict=True), key=lambda p: -p[0]):
        lightest = loads.index(min(loads))
        shares[lightest].append(k)
        loads[lightest] += size
    texts = {}
    for index in [*range(1, parts), 0]:
        rest = [k for share in shares[1:] for k in share] if index == 0 else []
        texts[index] = emit_module(shares[index], extend if index == 0 else None, rest)
        emitted(index, texts[index])
    return [texts[index] for index in range(parts)]
