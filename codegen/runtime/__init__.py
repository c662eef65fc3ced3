"""Stage 5 of the back end: running a linked program (the native runner, the Executable that
wraps it, the device sanitizer, latency measurement, and the single-threaded BLAS it calls)."""
