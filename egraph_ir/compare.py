"""Comparing results with dtype-aware tolerances: one definition for tests, the soundness
checker and the command line's checks (no hypothesis here, so the CLI starts fast)."""

from __future__ import annotations

from typing import Any

import numpy as np

# Tolerances per dtype for comparing a transformed program with the original. Rewrites may
# reorder floating-point operations (a sum over K terms moves by about K ulps, and random
# programs keep K below a few hundred), so float32 allows ~1e-4 relative plus a small
# absolute term for results that cancel to near zero.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-9, 1e-12),
    "bfloat16": (2e-2, 2e-2),  # 8 significant bits: one ulp is 0.4-0.8% relative
}
# the ml_dtypes float types (numpy kind "V"), compared after widening to float32
WIDENED = frozenset(
    (
        "bfloat16",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float4_e2m1fn",
    )
)


def tolerance(dtype: str) -> tuple[float, float]:
    """(rtol, atol) for a dtype; integers and bools compare exactly."""
    return TOLERANCES.get(dtype, (0.0, 0.0))


def mismatch(a: Any, b: Any, where: str = "output", signed_zeros: bool = False) -> str | None:
    """Where a and b (arrays or tuples of arrays) differ beyond the dtype's tolerance, or
    None: shapes and dtypes must agree, NaN must meet NaN, integers compare exactly; with
    `signed_zeros`, -0.0 and +0.0 differ too."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)):
            return f"{where}: tuple arity differs"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            problem = mismatch(x, y, f"{where}[{i}]", signed_zeros)
            if problem:
                return problem
        return None
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{where}: {a.dtype}{list(a.shape)} against {b.dtype}{list(b.shape)}"
    name = str(a.dtype)
    if name in WIDENED:  # ml_dtypes floats are numpy kind "V": compared as the floats they are
        a, b = a.astype(np.float32), b.astype(np.float32)
    rtol, atol = tolerance(name)
    if a.dtype.kind not in "fc":
        bad = a != b
    else:
        with np.errstate(all="ignore"):
            bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        if signed_zeros and a.dtype.kind == "f":
            bad |= (a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b))
    if not np.any(bad):
        return None
    at = tuple(int(k) for k in np.argwhere(bad)[0])
    first = f"{where} differs at {list(at)}: {a[at].item()!r} against {b[at].item()!r}"
    if a.dtype.kind not in "fc":
        return first
    if a[at] == 0 and b[at] == 0:
        return f"{first} (the sign of a zero)"
    with np.errstate(all="ignore"):
        diff = np.abs(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64) - b)
        finite = np.isfinite(diff)
        worst = float(np.max(diff[finite])) if np.any(finite) else float("inf")
        scale = np.abs(b.astype(np.float64) if b.dtype.kind == "f" else b)
        rel = np.where(diff == 0, 0.0, diff / np.where(scale > 0, scale, np.nan))[finite]
        rel = np.where(np.isnan(rel), np.inf, rel)
        worst_rel = float(np.max(rel)) if rel.size else float("inf")
    return (
        f"{first} (tolerance rtol={rtol:g}, atol={atol:g}; largest difference "
        f"{worst:.3g} absolute, {worst_rel:.3g} relative)"
    )


def leaves(result: Any) -> tuple[Any, ...]:
    """The arrays of a result, nested tuples (or lists) flattened in order."""
    out, stack = [], [result]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple | list):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return tuple(out)
