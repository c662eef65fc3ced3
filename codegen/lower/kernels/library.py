"""Kernels around a native or library anchor: the direct convolution and the packed product
(JIT micro-kernels with the epilogue per block), BLAS products and the other convolutions
(1x1 as GEMM, im2col + GEMM, grouped loops) with the epilogue after them."""

from __future__ import annotations





































