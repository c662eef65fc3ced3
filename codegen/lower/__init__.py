"""Lower one primitive function (a fused group) to a kernel (codegen/lower/kinds.py).

select.py picks the group's anchor and a `Strategy` from a table keyed by the anchor's op;
driver.py builds it:

- `LoopKernel`: injective/elementwise groups become one loop nest over the output with
  every producer inlined (group.py holds the inlining state); a reduction, softmax, pooling
  or small-product anchor becomes its own nest (nests.py, windows.py) followed by the
  elementwise epilogue, in place, in the same kernel;
- `GemmKernel`: large dense, matmul and batch_matmul anchors run through BLAS, then the
  fused epilogue (bias, activation, residual) runs as a JIT loop over the result, in place;
  float32 products on constant weights run in a packed JIT micro-kernel (library.py);
- `ConvKernel`: every conv2d runs natively — a register-blocked micro-kernel, a GEMM over
  JIT im2col columns (or over the input itself for 1x1), or direct loops for grouped and
  depthwise convolutions — with the epilogue after it (library.py);
- `HostKernel`: a group with an op that has no compute definition (or tuple results) runs
  through the op's numpy reference; `codegen.host_fallback=False` makes that an error.

`KernelCache` (cache.py) lowers every group of a graph and lets identical groups share
compiled code.
"""
