"""Hypothesis profiles, registered once: `ci` (default) and `thorough` (HYPOTHESIS_PROFILE);
fixtures for the reference models of ../shared."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=20,  # make test within its 10 minutes on 2 cores; `thorough` draws 500
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

# The suite tests the shape rules and its own kernel databases, never a developer's
# measurements (`egc tune` writes them under the user cache): an empty cache of its own,
# removed when the process (each xdist worker has one) ends: runs used to leave ~11 MB each.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="egc-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], ignore_errors=True)

SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"


@pytest.fixture
def shared_models() -> Path:
    """The reference ONNX files; tests that need them skip where ../shared is absent."""
    if not SHARED_MODELS.is_dir():
        pytest.skip("../shared/models is not present on this machine")
    return SHARED_MODELS


RealModel = tuple[Path, dict, Any]  # the ONNX file, its inputs by name, the expected output


@pytest.fixture
def real_model(request: pytest.FixtureRequest) -> Callable[[str], RealModel]:
    """`real_model(name)`: a real export of ../shared/models/real with its inputs and
    expected output; where ../shared is absent, a small model of the same structure built
    in code (tests/real_like.py), expected = ONNX Runtime's output, so a fresh clone tests
    the same paths."""

    def load(name: str) -> RealModel:
        path = SHARED_MODELS / "real" / f"{name}.onnx"
        if path.exists():
            inputs = dict(np.load(path.with_suffix(".npz")))
            return path, inputs, inputs.pop("expected")
        return _real_like(name, request.getfixturevalue("tmp_path_factory"))

    return load


def _real_like(name: str, tmp: pytest.TempPathFactory) -> RealModel:
    import importlib.util

    ort = pytest.importorskip("onnxruntime")
    spec = importlib.util.spec_from_file_location(
        "real_like", Path(__file__).with_name("real_like.py")
    )
    assert spec is not None and spec.loader is not None
    real_like = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real_like)
    if name not in real_like.BUILDERS:
        pytest.skip(f"no generated equivalent of {name} (and ../shared is absent)")
    model, inputs = real_like.BUILDERS[name]()
    path = tmp.mktemp("real_like") / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return path, inputs, session.run(None, inputs)[0]
