"""How a build's kernels are dealt over LLVM modules that compile in parallel (one per
thread), each handed on as soon as it is emitted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llvmlite import ir

from ..loop_ir import Kernel, statements
from ..loop_text import code_key
from .emit import emit_module
from .objcompile import QUICK


@dataclass
class SharedModules:
    """What the specialisations of one symbolic program share (codegen/symbolic.py): each
    kernel's module text, by the kernel's loop IR, and each text's object code, by its
    digest. A kernel the sizes do not change is emitted and compiled once."""

    texts: dict[str, str] = field(default_factory=dict)
    objects: dict[str, bytes] = field(default_factory=dict)


def emit_modules(
    kernels: list[Kernel],
    extend: Callable[[ir.Module], None] | None,
    parts: int,
    emitted: Callable[[int, str], None] = lambda index, text: None,
    per_kernel: bool = False,
    known: dict[str, str] | None = None,
    glue: str = "",
) -> list[str]:
    """The kernels dealt over `parts` modules that compile in parallel, after a first
    module that holds only what `extend` adds (the glue, compiled unoptimised) and
    declares the kernels. `emitted(index, text)` hears of each module as soon as it is
    made (the first last): a compiler can start on it while the next is emitted.
    `per_kernel`: a module of its own for each kernel, so that a kernel's module text
    (and its object code, jit.Compilation's cache) repeats wherever the kernel does;
    `known` keeps those texts by kernel, so a kernel seen before is not emitted again,
    and the glue's by `glue` where one is given."""
    shares = _per_kernel(kernels) if per_kernel else [[], *(s for s in _dealt(kernels, parts) if s)]
    parts = len(shares)
    texts = {}
    for index in [*range(1, parts), 0]:
        rest = [k for share in shares[1:] for k in share] if index == 0 else []
        # the glue (module 0): the same where `glue` says so (a symbolic program's)
        key = "|".join(code_key(k) for k in shares[index]) if index else glue
        text = known.get(key) if known is not None and key else None
        if text is None:
            text = emit_module(shares[index], extend if index == 0 else None, rest)
            if known is not None and key:
                known[key] = text
        if index == 0 and not shares[0] and not text.startswith(QUICK):
            text = f"{QUICK}\n{text}"
        texts[index] = text
        emitted(index, text)
    return [texts[index] for index in range(parts)]


def _dealt(kernels: list[Kernel], parts: int) -> list[list[Kernel]]:
    """Kernels over at most `parts` modules of about equal work, 4 kernels or more each."""
    parts = max(1, min(parts, len(kernels) // 4 or 1))
    sizes = [statements(k.body) for k in kernels]  # a proxy for LLVM's work
    loads = [0.0] * parts
    shares: list[list[Kernel]] = [[] for _ in range(parts)]
    for size, k in sorted(zip(sizes, kernels, strict=True), key=lambda p: -p[0]):
        lightest = loads.index(min(loads))
        shares[lightest].append(k)
        loads[lightest] += size
    return shares


def _per_kernel(kernels: list[Kernel]) -> list[list[Kernel]]:
    return [[], *([k] for k in sorted(kernels, key=lambda k: k.name))]
