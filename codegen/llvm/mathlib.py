"""Vectorisable float32 math, emitted inline (a libm call in a loop blocks vectorisation).

Error bounds, checked against numpy on 1M points by tests/codegen/llvm/test_mathlib.py:

- exp: Cephes expf (range reduction by ln 2, degree-5 polynomial, exponent bits): relative
  error <= 2e-7 on [-87, 88]; inf above 88.72, 0 below -88.3, NaN kept;
- log: Cephes logf (mantissa/exponent split, degree-8 polynomial), subnormals rescaled:
  relative error <= 2e-7; log 0 = -inf, log of a negative = NaN, log inf = inf;
- tanh: odd Taylor polynomial below |x| < 0.1, else (1 - e^-2|x|) / (1 + e^-2|x|):
  absolute error <= 3e-7;
- sigmoid: 1 / (1 + exp(-x)): absolute error <= 2e-7;
- erf: Abramowitz & Stegun 7.1.26 (1.5e-7 in exact arithmetic), evaluated in float32:
  absolute error <= 6e-7.

float64 uses LLVM intrinsics and libm (exact, not vectorised).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llvmlite import ir

from egraph_ir.measured import host_has_vnni  # vpdpbusd: code is compiled for the host

from .cpu import host_has
from .lookup import Tables

F32 = ir.FloatType()
I32 = ir.IntType(32)
I8 = ir.IntType(8)


class MathLib:
    def __init__(self, module: ir.Module) -> None:
        self.module = module
        self.declared: dict[str, ir.Function] = {}
        self.tables = Tables(module)

    def intrinsic(self, name: str, ty: ir.Type, arity: int = 1) -> ir.Function:
        """`llvm.<name>.f32` / `.f64`, or a libm function, declared once."""
        suffix = "f32" if isinstance(ty, ir.FloatType) else "f64"
        full = f"llvm.{name}.{suffix}" if not name.startswith("libm.") else name[5:]
        if full not in self.declared:
            fnty = ir.FunctionType(ty, [ty] * arity)
            self.declared[full] = ir.Function(self.module, fnty, name=full)
        return self.declared[full]

    def saturating_to_int(
        self, b: ir.IRBuilder, x: ir.Value, ty: ir.IntType, signed: bool, exact: bool = False
    ) -> ir.Value:
        """The cast semantics the interpreter defines: NaN gives 0 and out-of-range values
        clamp (fptosi would be poison there). To 8 and 16 bits and to int32 this is a clamp
        to the type's range (int32's top: the largest float32 below it, and a select above
        it), a conversion to int32 and a truncation, which vectorise (the
        llvm.fpto{s,u}i.sat intrinsic does not on x86: each lane became a scalar
        conversion, and requantize's epilogue cost as much as the int8 convolution);
        other types keep the intrinsic. `exact`: x is known to be an integer of the type (a
        plain conversion; loop_ir.Cast.exact)."""
        if exact:
            return b.fptosi(x, ty) if signed else b.fptoui(x, ty)
        if ty.width <= 16 or (ty.width == 32 and signed):
            low, high = (
                (-(2 ** (ty.width - 1)), 2 ** (ty.width - 1) - 1)
                if signed
                else (0, 2**ty.width - 1)
            )
            top = (
                float(np.nextafter(np.float32(high), 0))
                if high >= 2**24 and isinstance(x.type, ir.FloatType)
                else float(high)
            )
            # compare-and-select clamps (one vmaxps / vminps each; llvm.maxnum's NaN rule
            # costs three instructions): a NaN becomes `low`, and the select below 0
            least, most = ir.Constant(x.type, float(low)), ir.Constant(x.type, top)
            bounded = b.select(b.fcmp_ordered(">", x, least), x, least)
            bounded = b.select(b.fcmp_ordered("<", bounded, most), bounded, most)
            whole = b.fptosi(bounded, I32)
            if ty.width < 32:
                whole = b.trunc(whole, ty)
            elif top != high:  # int32's top is no float32: above the largest one below it
                over = b.fcmp_ordered(">", x, ir.Constant(x.type, top))
                whole = b.select(over, ir.Constant(ty, high), whole)
            return b.select(self.isnan(b, x), ir.Constant(ty, 0), whole)
        src = "f32" if isinstance(x.type, ir.FloatType) else "f64"
        full = f"llvm.fpto{'s' if signed else 'u'}i.sat.i{ty.width}.{src}"
        if full not in self.declared:
            self.declared[full] = ir.Function(self.module, ir.FunctionType(ty, [x.type]), full)
        return b.call(self.declared[full], [x])

    def call(self, b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
        return b.call(self.intrinsic(name, args[0].type, len(args)), list(args))

    def dot4(
        self, b: ir.IRBuilder, acc: ir.Value, x: ir.Value, y: ir.Value, pairs: bool = False
    ) -> ir.Value:
        """acc + per 32-bit lane the dot product of x's four unsigned bytes with y's four
        signed bytes: one vpdpbusd with VNNI; with `pairs` (loop_ir.Dot4) vpmaddubsw and
        vpmaddwd; elsewhere the same sum in plain vector IR (widened products, four
        strided lane shuffles added), which cannot overflow either: each lane adds at most
        4 * 255 * 128."""
        lanes = acc.type.count
        if pairs:
            return self._pair_sums(b, acc, x, y)
        if host_has_vnni() and lanes == 16:
            name = "llvm.x86.avx512.vpdpbusd.512"
            if name not in self.declared:
                bytes_ = ir.VectorType(I8, 64)
                fnty = ir.FunctionType(acc.type, [acc.type, bytes_, bytes_])
                self.declared[name] = ir.Function(self.module, fnty, name=name)
            as_bytes = [b.bitcast(v, ir.VectorType(I8, 4 * lanes)) for v in (x, y)]
            return b.call(self.declared[name], [acc, *as_bytes])
        wide = ir.VectorType(I32, 4 * lanes)
        xs = b.zext(b.bitcast(x, ir.VectorType(I8, 4 * lanes)), wide)
        ys = b.sext(b.bitcast(y, ir.VectorType(I8, 4 * lanes)), wide)
        products = b.mul(xs, ys)
        total = acc
        for k in range(4):
            pick = ir.Constant(ir.VectorType(I32, lanes), [4 * i + k for i in range(lanes)])
            total = b.add(total, b.shuffle_vector(products, ir.Constant(wide, ir.Undefined), pick))
        return total

    def _pair_sums(self, b: ir.IRBuilder, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        """dot4 with each pair of byte products saturated to int16: vpmaddubsw (unsigned by
        signed bytes, pairs added with saturation) and vpmaddwd by ones (the two pairs of a
        word added in int32), on 512-bit vectors with AVX-512 BW, else on 256-bit halves
        (the int8 kernels take pairs only where the CPU has AVX2: integer_sums_fit)."""
        lanes = acc.type.count
        width = 512 if host_has("avx512bw") and lanes == 16 else 256
        if not host_has("avx2") or (4 * 8 * lanes) % width:
            raise NotImplementedError(f"int16 pair sums of {lanes} words without AVX2")
        words = width // 32  # 32-bit lanes per hardware vector
        suffix = "avx512.pmaddubs.w.512" if width == 512 else "avx2.pmadd.ub.sw"
        madd = "avx512.pmaddw.d.512" if width == 512 else "avx2.pmadd.wd"
        bytes_, shorts, ints = (ir.VectorType(ir.IntType(n), width // n) for n in (8, 16, 32))
        pair_fn = self._declare(f"llvm.x86.{suffix}", shorts, [bytes_, bytes_])
        word_fn = self._declare(f"llvm.x86.{madd}", ints, [shorts, shorts])
        ones = ir.Constant(shorts, [1] * shorts.count)
        parts = []
        for start in range(0, lanes, words):
            pick = lane_mask(range(start, start + words))
            halves = [b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), pick) for v in (x, y)]
            xb, yb = (b.bitcast(h, bytes_) for h in halves)
            parts.append(b.call(word_fn, [b.call(pair_fn, [xb, yb]), ones]))
        total = parts[0]
        if len(parts) > 1:
            total = b.shuffle_vector(parts[0], parts[1], lane_mask(range(lanes)))
        return b.add(acc, total)

    def _declare(self, name: str, result: ir.Type, args: list[ir.Type]) -> ir.Function:
        if name not in self.declared:
            self.declared[name] = ir.Function(self.module, ir.FunctionType(result, args), name=name)
        return self.declared[name]

    # ------------------------------------------------------------ helpers
    @staticmethod
    def c(v: float) -> ir.Constant:
        return ir.Constant(F32, v)

    def mul_add(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        """x * y + z, fused where the CPU has FMA (llvm.fmuladd): half the instructions
        of a polynomial, and one rounding fewer, inside every bound above."""
        return self.call(b, "fmuladd", x, y, z)

    def poly(self, b: ir.IRBuilder, x: ir.Value, coeffs: list[float]) -> ir.Value:
        acc: ir.Value = ir.Constant(F32, coeffs[0])
        for k in coeffs[1:]:
            acc = self.mul_add(b, acc, x, ir.Constant(F32, k))
        return acc

    @staticmethod
    def isnan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return b.fcmp_unordered("uno", x, x)

    # ------------------------------------------------------------ functions
    def exp(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        if not isinstance(x.type, ir.FloatType):
            return self.call(b, "exp", x)
        c = self.c
        hi, lo = 88.3762626647949, -88.3762626647949
        xc = b.select(b.fcmp_ordered(">", x, c(hi)), c(hi), x)
        xc = b.select(b.fcmp_ordered("<", xc, c(lo)), c(lo), xc)
        fx = self.call(b, "rint", b.fmul(xc, c(1.44269504088896341)))
        r = self.mul_add(b, fx, c(-0.693359375), xc)
        r = self.mul_add(b, fx, c(2.12194440e-4), r)
        z = b.fmul(r, r)
        p = self.poly(
            b,
            r,
            [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1],
        )  # fmt: skip
        y = b.fadd(self.mul_add(b, p, z, r), c(1.0))
        n = b.fptosi(fx, I32)
        bits = b.shl(b.add(n, ir.Constant(I32, 127)), ir.Constant(I32, 23))
        y = b.fmul(y, b.bitcast(bits, F32))
        y = b.select(b.fcmp_ordered(">", x, c(88.72283905206835)), c(float("inf")), y)
        y = b.select(b.fcmp_ordered("<", x, c(-88.3)), c(0.0), y)
        return b.select(self.isnan(b, x), x, y)

    def log(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        if not isinstance(x.type, ir.FloatType):
            return self.call(b, "log", x)
        c = self.c
        tiny = b.fcmp_ordered("<", x, c(1.17549435e-38))
        xs = b.select(tiny, b.fmul(x, c(8388608.0)), x)
        bits = b.bitcast(xs, I32)
        e = b.sub(
            b.and_(b.lshr(bits, ir.Constant(I32, 23)), ir.Constant(I32, 0xFF)),
            ir.Constant(I32, 126),
        )
        e = b.select(tiny, b.sub(e, ir.Constant(I32, 23)), e)
        m = b.bitcast(
            b.or_(b.and_(bits, ir.Constant(I32, 0x807FFFFF)), ir.Constant(I32, 0x3F000000)), F32
        )
        small = b.fcmp_ordered("<", m, c(0.707106781186547524))
        e = b.select(small, b.sub(e, ir.Constant(I32, 1)), e)
        m = b.select(small, b.fsub(b.fadd(m, m), c(1.0)), b.fsub(m, c(1.0)))
        ef = b.sitofp(e, F32)
        z = b.fmul(m, m)
        p = self.poly(
            b,
            m,
            [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1],
        )  # fmt: skip
        y = b.fmul(b.fmul(p, m), z)
        y = b.fadd(y, b.fmul(ef, c(-2.12194440e-4)))
        y = b.fsub(y, b.fmul(z, c(0.5)))
        r = b.fadd(b.fadd(m, y), b.fmul(ef, c(0.693359375)))
        r = b.select(b.fcmp_ordered("==", x, c(0.0)), c(float("-inf")), r)
        r = b.select(b.fcmp_ordered("<", x, c(0.0)), c(float("nan")), r)
        r = b.select(b.fcmp_ordered("==", x, c(float("inf"))), x, r)
        return b.select(self.isnan(b, x), x, r)

    def tanh(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        if not isinstance(x.type, ir.FloatType):
            return self.call(b, "libm.tanh", x)
        c = self.c
        ax = self.call(b, "fabs", x)
        t = self.exp(b, b.fmul(ax, c(-2.0)))
        r = b.fdiv(b.fsub(c(1.0), t), b.fadd(c(1.0), t))
        r = b.select(b.fcmp_ordered("<", x, c(0.0)), b.fneg(r), r)
        x2 = b.fmul(x, x)
        small = b.fmul(x, self.poly(b, x2, [-17 / 315, 2 / 15, -1 / 3, 1.0]))
        r = b.select(b.fcmp_ordered("<", ax, c(0.1)), small, r)
        return b.select(self.isnan(b, x), x, r)

    def sigmoid(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        one = ir.Constant(x.type, 1.0)
        return b.fdiv(one, b.fadd(one, self.exp(b, b.fneg(x))))

    def erf(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        if not isinstance(x.type, ir.FloatType):
            return self.call(b, "libm.erf", x)
        c = self.c
        ax = self.call(b, "fabs", x)
        t = b.fdiv(c(1.0), b.fadd(c(1.0), b.fmul(c(0.3275911), ax)))
        p = self.poly(b, t, [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592])
        y = b.fsub(c(1.0), b.fmul(b.fmul(p, t), self.exp(b, b.fneg(b.fmul(ax, ax)))))
        y = b.select(b.fcmp_ordered("<", x, c(0.0)), b.fneg(y), y)
        return b.select(self.isnan(b, x), x, y)


def lane_mask(lanes: Sequence[int]) -> ir.Constant:
    """A shufflevector mask: the lanes to pick, as i32 constants."""
    return ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), list(lanes))
