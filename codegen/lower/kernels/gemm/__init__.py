"""The product kernels on constant weights packed at compile time: packed (float32 panels)
and int8 (byte words summed by vpdpbusd); other products go to BLAS (codegen/runtime/blas.py)."""
