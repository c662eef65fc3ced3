"""Winograd's minimal filtering F(m x m, 3x3) as data: the input transform B^T, the weight
transform G and the output transform A^T for output tiles of m = 2 and m = 4 (Lavin and
Gray, "Fast Algorithms for Convolutional Neural Networks", 2016; interpolation points 0,
±1 for m = 2 and 0, ±1, ±2 for m = 4), and the loop-IR linear combinations that apply
them to vectors (zero coefficients left out, ±1 as additions, others as multiply-adds).

A tile of m x m outputs reads an n x n input patch (n = m + 2) and takes n^2 products
per channel pair where the direct convolution takes 9 m^2: 16 for 4 outputs (2.25x
fewer), 36 for 16 (4x fewer). The larger tile's transforms have coefficients up to 8,
so its results carry more rounding (on O(1) outputs of 64 to 512 channel layers about
3e-5 against 3e-6).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ....loop_ir import Bin, Const, LExpr, Splat


@dataclass(frozen=True)
class Minimal:
    """F(m x m, 3x3): its matrices (float64) and sizes."""

    m: int
    bt: np.ndarray  # (n, n)
    g: np.ndarray  # (n, 3)
    at: np.ndarray  # (m, n)

    @property
    def n(self) -> int:
        return self.m + 2

    @property
    def positions(self) -> int:
        return self.n * self.n

    @property
    def kron_g(self) -> np.ndarray:
        """(n^2, 9) float32: position a * n + b, tap k * 3 + l, so U = kron(G, G) g."""
        return np.kron(self.g, self.g).astype(np.float32)


@cache
def minimal(m: int) -> Minimal:
    if m == 2:
        bt = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
        g = [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]
        at = [[1, 1, 1, 0], [0, 1, -1, -1]]
    elif m == 4:
        bt = [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ]
        g = [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ]
        at = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
    else:
        raise ValueError(f"Winograd tiles of 2 or 4 outputs, not {m}")
    return Minimal(m, *(np.array(x, dtype=np.float64) for x in (bt, g, at)))


def combine(matrix: np.ndarray, values: list[LExpr], dtype: str) -> list[LExpr]:
    """matrix @ values for vectors: one expression per row of the matrix."""
    rows = []
    for coefficients in matrix:
        total: LExpr | None = None
        for c, v in zip(coefficients.tolist(), values, strict=True):
            if c == 0:
                continue
            if total is None:
                total = v if c == 1 else Bin(dtype, "mul", Splat(dtype, Const("float32", c)), v)
            elif abs(c) == 1:
                total = Bin(dtype, "add" if c > 0 else "sub", total, v)
            else:
                total = Bin(
                    dtype, "add", total, Bin(dtype, "mul", Splat(dtype, Const("float32", c)), v)
                )
        assert total is not None, "a transform row of zeros"
        rows.append(total)
    return rows
