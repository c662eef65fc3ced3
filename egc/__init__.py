"""egc: the application on top of the compiler (layer 4; may import every other layer).

The `egc` command line (cli/), the compile job and its report (job.py), differential and
malformed-input fuzzing (fuzz/), ONNX node conformance (conformance.py) and the
onnx.backend Backend (`egc.onnx_backend.EgcBackend`). `codegen` below it is only the back
end: it knows nothing of command lines or reports.
"""

from __future__ import annotations
