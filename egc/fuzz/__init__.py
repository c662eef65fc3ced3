"""Fuzzers that stay with the project (issue #18): a differential fuzzer over a broad program
generator (every registered op and attribute form, every dtype, values at their extremes,
extent-1 and empty axes), mutation fuzzers for IR text and rule files, and a malformed-ONNX
generator. `python -m egc.fuzz --seconds 600` (or `make fuzz SECONDS=600`) runs them in
a watched worker process, so crashes and hangs are caught too, and saves every failing
case, shrunk, under `fuzz-failures/`."""
