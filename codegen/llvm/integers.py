"""Integer arithmetic of the loop IR in LLVM IR: defined where the hardware traps."""

from __future__ import annotations

from llvmlite import ir

from .mathlib import MathLib


def _unsigned(dtype: str) -> bool:
    return dtype.startswith("uint")


def int_binary(
    b: ir.IRBuilder, math: MathLib, op: str, dtype: str, x: ir.Value, y: ir.Value
) -> ir.Value | None:
    """An integer operation of the loop IR, or None where it has none."""
    ty = x.type
    if op == "add":
        return b.add(x, y)
    if op == "sub":
        return b.sub(x, y)
    if op == "mul":
        return b.mul(x, y)
    if op in ("div", "rem"):
        return int_division(b, op, dtype, x, y)
    if op in ("max", "min"):
        sym = ">" if op == "max" else "<"
        pick = b.icmp_unsigned(sym, x, y) if _unsigned(dtype) else b.icmp_signed(sym, x, y)
        return b.select(pick, x, y)
    if op == "pow":
        d = ir.DoubleType()
        xf = b.uitofp(x, d) if _unsigned(dtype) else b.sitofp(x, d)
        yf = b.uitofp(y, d) if _unsigned(dtype) else b.sitofp(y, d)
        r = math.call(b, "pow", xf, yf)
        return b.fptoui(r, ty) if _unsigned(dtype) else b.fptosi(r, ty)
    return None


def int_division(b: ir.IRBuilder, op: str, dtype: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """x / 0 is 0; and x / -1 is computed as -x (wrapping), since the hardware traps on
    INT_MIN / -1 (SIGFPE would kill the process)."""
    ty = x.type
    zero = ir.Constant(ty, 0)
    is_zero = b.icmp_unsigned("==", y, zero)
    odd = is_zero
    minus_one = None
    if not _unsigned(dtype):
        minus_one = b.icmp_signed("==", y, ir.Constant(ty, -1))
        odd = b.or_(is_zero, minus_one)
    safe = b.select(odd, ir.Constant(ty, 1), y)
    if op == "div":
        q = b.udiv(x, safe) if _unsigned(dtype) else b.sdiv(x, safe)
        if minus_one is not None:
            q = b.select(minus_one, b.sub(zero, x), q)
    else:
        q = b.urem(x, safe) if _unsigned(dtype) else b.srem(x, safe)
        if minus_one is not None:
            q = b.select(minus_one, zero, q)
    return b.select(is_zero, zero, q)
