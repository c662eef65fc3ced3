"""Hypothesis profiles, registered once: `ci` (default) and `thorough` (HYPOTHESIS_PROFILE)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=30,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=500,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"


@pytest.fixture
def shared_models() -> Path:
    """The reference ONNX files; tests that need them skip where ../shared is absent."""
    if not SHARED_MODELS.is_dir():
        pytest.skip("../shared/models is not present on this machine")
    return SHARED_MODELS
