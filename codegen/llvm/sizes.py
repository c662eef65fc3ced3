"""The size variables' values as kernels of a symbolic program read them: the global
`egc_sizes`, declared by each kernel module that reads a size (loop_ir.Size) and defined,
with one specialisation's values, by that specialisation's glue module. The kernels'
object code is the same for every size; only the glue differs."""

from __future__ import annotations

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


def define_sizes(module: ir.Module) -> None:
    """Define `egc_sizes` in module, zeros until the runtime writes a specialisation's
    values into it (JitLibrary.write_sizes): the module is the same for every size."""
    table = sizes_global(module)
    table.initializer = ir.Constant(SIZES_TYPE, [ir.Constant(ir.IntType(64), 0)] * MAX_SIZES)
