"""Loop metadata the kernels' loops carry: LLVM's hints to unroll or not, to vectorise
(masked or not), or to leave a loop to scalar code, each loop under an ID of its own."""

from __future__ import annotations

import itertools

from llvmlite import ir

SELF = "egc.self"
_LOOP_IDS = itertools.count()  # a distinct loop ID each (llvmlite merges equal metadata)


def loop_id(
    module: ir.Module, unroll: bool, vectorize: bool, masked: bool, scalar: bool = False
) -> ir.Value:
    """A fresh loop ID (its self-reference is made in the text) asking LLVM not to unroll
    and/or to vectorise (then not unrolled either: full unrolling runs first and would
    leave nothing to vectorise; the vectoriser interleaves instead), `masked`: the whole
    loop as masked vectors. A row shorter than a vector is one masked step; a longer one
    runs whole vectors and a short tail, which beats masking every step (the measurements:
    docs/performance.md). `scalar`: not vectorised by the loop vectoriser."""
    hints = []
    if scalar:
        flag = ir.Constant(ir.IntType(1), 0)
        hints.append(
            module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), flag])
        )
    if not unroll or vectorize:
        hints.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    names = ("llvm.loop.vectorize.enable", "llvm.loop.vectorize.predicate.enable")
    for name in names[: 2 if masked else 1] if vectorize else ():
        flag = ir.Constant(ir.IntType(1), 1)
        hints.append(module.add_metadata([ir.MetaDataString(module, name), flag]))
    return module.add_metadata([ir.MetaDataString(module, f"{SELF}.{next(_LOOP_IDS)}"), *hints])
