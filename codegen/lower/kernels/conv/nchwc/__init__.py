"""Convolutions on channel-blocked data (NCHW16c: a pixel's 16 channels are one vector),
the layouts BlockLayout chooses: depthwise and pointwise float32 kernels, and int8's
(bytes of 16 channels, VNNI words)."""
