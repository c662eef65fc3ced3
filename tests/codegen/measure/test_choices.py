"""Kernel choices by measured time (codegen/measure/choices.py, codegen.measure.tune, `egc tune`): the
database decides where it measured every candidate, the shape rules elsewhere; bad or
foreign databases are clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
from codegen.lower.select import tuning_key
from egraph_ir import op
from egraph_ir.measured import KernelTimes
from egraph_ir.testing import assert_allclose


def _small_map_conv() -> ir.Function:
    """A 7x7 map: the shape rule takes the channel-lane kernel."""
    rng = np.random.default_rng(3)
    x = ir.var("x", shape=(1, 64, 7, 7))
    w = ir.const((rng.standard_normal((32, 64, 3, 3)) * 0.1).astype("float32"))
    return ir.Function([x], op.relu(op.conv2d(x, w, padding=(1,))))


def _variants(exe: codegen.Executable) -> list[str]:
    return [getattr(k, "variant", "") for k in exe.graph.kernels()]


def _write_db(path: Path, key: str, direct: float, channels: float) -> None:
    db = KernelTimes(path)
    db.record(key, {"conv/direct": direct, "conv/channels": channels})
    db.save()


def test_a_measurement_overrides_the_shape_rule(tmp_path: Path) -> None:
    fn = _small_map_conv()
    assert _variants(codegen.build(fn)) == ["channels"]  # no database: the rule
    anchor = ir.infer_type(fn).body.args[0]
    path = tmp_path / "kernels.json"
    _write_db(path, tuning_key(anchor), direct=1e-4, channels=2e-4)
    with pm.PassContext(config={"codegen.kernel_db": str(path)}):
        exe = codegen.build(fn)
    assert _variants(exe) == ["direct"]
    value = np.random.default_rng(0).standard_normal((1, 64, 7, 7)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, x=value))
    with pm.PassContext(config={"codegen.kernel_db": "off"}):
        assert _variants(codegen.build(fn)) == ["channels"]


def test_a_database_missing_a_candidate_leaves_the_rule(tmp_path: Path) -> None:
    db = KernelTimes(tmp_path / "k.json", times={"k": {"direct": 1.0}})
    assert db.fastest("k", ["direct", "channels"]) is None
    assert db.fastest("k", ["direct"]) == "direct"
    assert db.fastest("other", ["direct"]) is None


def test_bad_databases_are_clean_errors(tmp_path: Path) -> None:
    missing, broken, foreign = (tmp_path / n for n in ("none.json", "broken.json", "x.json"))
    broken.write_text("{ not json")
    foreign.write_text(json.dumps({"format": 2, "cpu": "another-cpu", "times": {}}))
    for path, problem in [
        (missing, "egc tune"),
        (broken, r"broken\.json"),
        (foreign, "measured on another-cpu"),
    ]:
        config = {"codegen.kernel_db": str(path)}
        with pm.PassContext(config=config), pytest.raises(ir.CompilerError, match=problem):
            codegen.build(_small_map_conv())


def test_the_profile_names_the_convolution_kernel() -> None:
    exe = codegen.build(_small_map_conv())
    value = np.zeros((1, 64, 7, 7), "float32")
    prof = exe.profile({"x": value}, repeats=2)
    assert [k.variant for k in prof] == ["channels"] and "conv/channels" in str(prof)
