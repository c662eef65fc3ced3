"""The size variables' values as kernels of a symbolic program read them: the global
`egc_sizes`, declared by each kernel module that reads a size (loop_ir.Size) and defined,
with one specialisation's values, by that specialisation's glue module. The kernels'
object code is the same for every size; only the glue differs."""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ..loop_ir import MAX_SIZES

SIZES_GLOBAL = "egc_sizes"
SIZES_TYPE = ir.ArrayType(ir.IntType(64), MAX_SIZES)


def sizes_global(module: ir.Module) -> ir.GlobalVariable:
    """The size variables' values (`egc_sizes`, in the program's order): declared where a
    kernel reads them, defined with the values by the glue module (codegen/plan/link.py)."""
    try:
        return module.get_global(SIZES_GLOBAL)
    except KeyError:
        return ir.GlobalVariable(module, SIZES_TYPE, SIZES_GLOBAL)


def define_sizes(module: ir.Module, values: Sequence[int]) -> None:
    """Define `egc_sizes` in module with these values (a specialisation's sizes)."""
    if len(values) > MAX_SIZES:
        raise ValueError(f"{len(values)} size variables; kernels read at most {MAX_SIZES}")
    table = sizes_global(module)
    padded = [*values, *[0] * (MAX_SIZES - len(values))]
    table.initializer = ir.Constant(SIZES_TYPE, [ir.Constant(ir.IntType(64), v) for v in padded])
    table.global_constant = True
