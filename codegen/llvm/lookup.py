"""Small constant tables read at computed indices (loop_ir.Lookup), as byte permutes.

A load from a table at a computed index vectorises to a gather, and gathers are slow:
on this machine (AMD EPYC, AVX-512) about 30 cycles per 16 lanes; an int8 convolution
of 16 -> 96 channels at 112x112 took 193 us with a clip after it and 515 us with a
quantised sigmoid (a 256-entry table) instead. With AVX-512 VBMI a 256-byte table sits in
four registers and two vpermi2b pick 64 entries each from 128 at once: a loop of table
reads runs 4x faster than gathered (1.2M reads, one thread: 112 vs 440 us).

LLVM's loop vectoriser does not form permutes from loads, but it calls the vector variant
of a scalar function when the call names one (the `vector-function-abi-variant`
attribute, VFABI names). So each table becomes an internal scalar function (a plain load,
kept out of line until the vectoriser has run) and a 16-lane variant; objcompile inlines
both after the O3 pipeline. Without VBMI there is no variant and the scalar function is
inlined at once: a gather, as before.
"""

from __future__ import annotations

import re

from llvmlite import ir

from ..loop_ir import LANES
from .cpu import host_has

I32 = ir.IntType(32)
FIRST_ATTRIBUTE_GROUP = 100  # emit.py's own group is #0
PERMUTE = "llvm.x86.avx512.vpermi2var.qi.512"  # bytes of two 64-byte tables by 7-bit indices
PREFIX = "egc_lookup_"  # a table's reader; its 16-lane variant adds _v16
VBMI = "avx512vbmi"


class Tables:
    """The tables of one module: a declared function per table while kernels are
    emitted, their definitions written into the module text at the end (`finish`)."""

    def __init__(self, module: ir.Module) -> None:
        self.module = module
        self.functions: dict[tuple[int, ...], ir.Function] = {}

    def read(self, b: ir.IRBuilder, table: tuple[int, ...], index: ir.Value) -> ir.Value:
        """table[index] as an i32 (index: any integer within the table)."""
        fn = self.functions.get(table)
        if fn is None:
            name = f"{PREFIX}{len(self.functions)}"
            fn = ir.Function(self.module, ir.FunctionType(I32, [I32]), name=name)
            self.functions[table] = fn
        return b.call(fn, [b.trunc(index, I32) if index.type != I32 else index])

    def finish(self, text: str) -> str:
        """The module text without the tables' declarations, their calls tagged with the
        vector variant, and their definitions at the end: one pass over the text each
        (a pass per table cost EfficientNet-B0's 65 tables 0.8 s)."""
        if not self.functions:
            return text
        vector = host_has(VBMI)
        text = _DECLARATION.sub("", text)
        tail = [_definitions(fn.name, table, vector) for table, fn in self.functions.items()]
        if vector:
            group = {
                fn.name: FIRST_ATTRIBUTE_GROUP + k for k, fn in enumerate(self.functions.values())
            }
            text = _CALL.sub(lambda m: f"{m[0]} #{group[m[1]]}", text)
            for name, k in group.items():
                variant = f"_ZGV_LLVM_N{LANES}v_{name}({name}_v{LANES})"
                tail.append(f'attributes #{k} = {{ "vector-function-abi-variant"="{variant}" }}')
            used = ", ".join(f"ptr @{name}_v{LANES}" for name in group)
            tail.append(f"declare <64 x i8> @{PERMUTE}(<64 x i8>, <64 x i8>, <64 x i8>)")
            tail.append(  # kept until the vectoriser has had its chance to call them
                f"@llvm.compiler.used = appending global [{len(group)} x ptr] [{used}], "
                'section "llvm.metadata"'
            )
        return text + "\n" + "\n".join(tail) + "\n"


_DECLARATION = re.compile(rf'^declare i32 @"?{PREFIX}\d+"?\(i32[^)]*\)[ \t]*\n', re.M)
_CALL = re.compile(rf'call i32 @"?({PREFIX}\d+)"?\([^)]*\)')


def _definitions(name: str, table: tuple[int, ...], vector: bool) -> str:
    """The table as 256 bytes, the scalar reader and (with VBMI) its 16-lane variant."""
    signed = min(table) < 0
    padded = list(table) + [table[-1]] * (256 - len(table))  # never read: indices are in range
    data = "".join(f"\\{v & 0xFF:02X}" for v in padded)
    extend = "sext" if signed else "zext"
    inline = "noinline" if vector else "alwaysinline"
    scalar = f"""@{name}_bytes = internal unnamed_addr constant [256 x i8] c"{data}", align 64
define internal i32 @{name}(i32 %i) {inline} nounwind willreturn memory(read) {{
  %p = getelementptr inbounds [256 x i8], ptr @{name}_bytes, i64 0, i32 %i
  %v = load i8, ptr %p
  %r = {extend} i8 %v to i32
  ret i32 %r
}}"""
    if not vector:
        return scalar
    lanes = f"<{LANES} x i32>"
    quarters = "\n".join(
        f"  %t{q} = load <64 x i8>, ptr getelementptr inbounds "
        f"(i8, ptr @{name}_bytes, i64 {64 * q}), align 64"
        for q in range(4)
    )
    attrs = "alwaysinline nounwind willreturn memory(read)"
    return f"""{scalar}
define internal {lanes} @{name}_v{LANES}({lanes} %i) {attrs} {{
{quarters}
  %bytes = bitcast {lanes} %i to <64 x i8>
  %low = call <64 x i8> @{PERMUTE}(<64 x i8> %t0, <64 x i8> %bytes, <64 x i8> %t1)
  %high = call <64 x i8> @{PERMUTE}(<64 x i8> %t2, <64 x i8> %bytes, <64 x i8> %t3)
  %upper = icmp uge {lanes} %i, {_splat(128)}
  %low32 = bitcast <64 x i8> %low to {lanes}
  %high32 = bitcast <64 x i8> %high to {lanes}
  %picked = select <{LANES} x i1> %upper, {lanes} %high32, {lanes} %low32
  %byte = trunc {lanes} %picked to <{LANES} x i8>
  %r = {extend} <{LANES} x i8> %byte to {lanes}
  ret {lanes} %r
}}"""


def _splat(value: int) -> str:
    return "<" + ", ".join([f"i32 {value}"] * LANES) + ">"
