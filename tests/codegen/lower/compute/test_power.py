"""float32 powers by a constant 2, 3 or 4 compile to multiplies, not a libm pow per lane
(codegen/lower/compute/definitions.py `_power`): GPT-2's GELU takes x ** 3."""

from __future__ import annotations

import numpy as np
import pytest

import codegen
import egraph_ir as ir


def _build(exponent: str, dtype: str = "float32") -> codegen.Executable:
    return codegen.build(
        ir.parse(f"def @main(%x: Tensor[(4099,), {dtype}]) {{ power(%x, {exponent}) }}")
    )


def _values(dtype: str = "float32") -> np.ndarray:
    x = np.random.default_rng(7).standard_normal(4099) * np.float32(40)
    x[:8] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-20, -3e12, 2e-38]  # overflow, underflow
    return x.astype(dtype)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_small_whole_powers_are_multiplies_rounded_once(n: int) -> None:
    exe = _build(f"{n}f")
    assert "llvm.pow" not in exe.get_source()
    x = _values()
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        truth = (x.astype(np.float64) ** n).astype(np.float32)  # the true power, rounded once
        libm = np.power(x, np.float32(n))
    np.testing.assert_array_equal(exe.run(x), truth)  # NaN, signed zeros and infinities too
    np.testing.assert_allclose(exe.run(x), libm, rtol=2.4e-7)  # numpy's powf: an ulp off


@pytest.mark.parametrize(("exponent", "dtype"), [("2.5f", "float32"), ("3f64", "float64")])
def test_other_powers_stay_libm_calls(exponent: str, dtype: str) -> None:
    exe = _build(exponent, dtype)
    assert "llvm.pow" in exe.get_source()
    x = np.abs(_values(dtype))
    power = np.float32(2.5) if dtype == "float32" else 3.0
    np.testing.assert_allclose(exe.run(x), np.power(x, power), rtol=1e-6)
