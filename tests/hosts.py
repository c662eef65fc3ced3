"""What the suite needs to know of the CPU it runs on.

The int8 kernels are chosen where the CPU multiplies bytes natively (VNNI); elsewhere
CanonicalizeQnn makes quantised layers float arithmetic on exact integers. Tests of the
kernels themselves force them (`force_int8_kernels`): without VNNI the emitter writes the
byte products out as plain vector arithmetic, the same integers.

ONNX Runtime's u8 x s8 kernels are exact only with VNNI: its AVX2 and AVX-512BW kernels
add pairs of byte products in saturating 16-bit lanes (vpmaddubsw), so a pair above 32767
clips. Where that is so, a test that wants "what ONNX Runtime's int8 kernels compute"
compares with the exact integers instead (`ORT_INT8_EXACT`).
"""

from __future__ import annotations

import pytest

from codegen.llvm.cpu import host_has

ORT_INT8_EXACT = host_has("avx512vnni") or host_has("avxvnni")
VECTOR_FLOATS = 16 if host_has("avx512f") else 8  # float32 lanes of the host's widest vector


def force_int8_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Choose the int8 convolution and product kernels whatever the CPU."""
    monkeypatch.setattr("codegen.lower.kernels.conv.int8.host_has_vnni", lambda: True)
    monkeypatch.setattr("codegen.lower.kernels.gemm.int8.host_has_vnni", lambda: True)
