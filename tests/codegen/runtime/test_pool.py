"""The native thread pool (codegen/llvm/native.py): every chunk of every region runs exactly
once and no region's wait can hang, however regions follow each other (the protocol is in
the module's docstring). The stress runs in a subprocess with a timeout: a hang fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("pool_stress.py")


@pytest.mark.slow
@pytest.mark.parametrize("threads", [2, 4])
def test_every_chunk_runs_exactly_once_over_many_regions(threads: int) -> None:
    regions = 1_000_000  # the old protocol hung within this many, 3 runs of 3
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(regions), str(threads)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["found"] == result["expected"]
