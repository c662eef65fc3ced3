"""What the suite needs to know of the CPU it runs on.

The int8 kernels are chosen where the CPU multiplies bytes natively: VNNI, or AVX2's
vpmaddubsw where its saturating 16-bit pairs give the sums a call declares (its `pairs`
attribute); elsewhere CanonicalizeQnn makes quantised layers float arithmetic on exact
integers. ONNX Runtime's u8 x s8 kernels are exact only with VNNI: its AVX2 and AVX-512BW
kernels add pairs of byte products in saturating 16-bit lanes, and CanonicalizeQnn makes
ours sum so too on such CPUs (config `qnn.saturating_pairs`, "auto"). Tests of the exact
kernels themselves pretend the CPU has VNNI (`force_int8_kernels`): the kernels are chosen
with exact sums, which the emitter writes out as plain vector arithmetic where the CPU
has no vpdpbusd; `ORT_INT8_EXACT` says whether ONNX Runtime's sums here are the exact ones.
"""

from __future__ import annotations

import pytest

from codegen.llvm.cpu import host_has

ORT_INT8_EXACT = host_has("avx512vnni") or host_has("avxvnni")
VECTOR_FLOATS = 16 if host_has("avx512f") else 8  # float32 lanes of the host's widest vector


def force_int8_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Choose the int8 convolution and product kernels, with exact sums, whatever the CPU
    (as on a VNNI host, where ONNX Runtime's sums are exact too)."""
    monkeypatch.setattr("codegen.lower.kernels.conv.shape.host_has_vnni", lambda: True)
    monkeypatch.setattr("passmgr.passes.onnxruntime_sums.onnxruntime_saturates", lambda: False)
