"""The convolution kernels, one module each: direct (pixels in the lanes), channels (output
channels in the lanes), int8, channels_int8 and depthwise_int8 (byte kernels),
nchwc/ (channel-blocked data, float32 and bytes), winograd, and library (GEMM,
im2col, grouped loops); shape.py is the vocabulary they share, prologue.py the padded and
phase-split input copies, epilogue.py the fused epilogues they end with."""
