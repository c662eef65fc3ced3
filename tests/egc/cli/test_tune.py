"""`egc tune`: the model's convolutions measured with every candidate kernel, recorded in
the kernel database, and read back by the next compile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from egc.cli.main import main as egc_main
from egraph_ir import models
from egraph_ir.measured import KernelTimes, cpu_id
from egraph_ir.testing import assert_allclose


def test_egc_tune_measures_every_candidate_and_the_compile_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The built-in CNN's convolutions, each kernel measured (times are whatever this
    machine gives: nothing asserts them), recorded, and read back by the next compile.
    In NCHW (layout.blocked=false): at opt level 3 the CNN's layers are blocked kernels,
    which have no candidates to choose between."""
    path = tmp_path / "kernels.json"
    args = ["tune", "cnn", "--db", str(path), "--threads", "1", "--config", "layout.blocked=false"]
    assert egc_main(args) == 0
    out = capsys.readouterr().out
    assert "direct" in out and "channels" in out and str(path) in out
    data = json.loads(path.read_text())
    assert data["cpu"] == cpu_id() and data["times"]
    choices = [s for s in data["times"].values() if set(s) == {"conv/direct", "conv/channels"}]
    assert choices and all(s > 0 for seconds in choices for s in seconds.values())
    assert data["rates"]  # the layouts' rates in the same store
    db = KernelTimes.open(path)
    with pm.PassContext(config={"codegen.kernel_db": str(path)}):
        exe = codegen.build(models.cnn())
    expected = [name for k in db.times if (name := db.fastest(k, ["conv/direct", "conv/channels"]))]
    conv = [k.kernel_name for k in exe.graph.kernels() if k.kind == "conv"]
    assert sorted(conv) == sorted(expected)
    inputs = models.example_inputs("cnn")
    assert_allclose(exe.run(**inputs), ir.interpret(models.cnn(), **inputs))
