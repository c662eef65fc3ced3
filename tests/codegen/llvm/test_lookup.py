"""Reads of small constant integer tables (a quantised sigmoid's) as byte permutes
(codegen/llvm/lookup.py): equal to the interpreter for every table size, signedness, index
mode and out-of-range index, and vectorised with vpermi2b where the CPU has VBMI."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.llvm.cpu import host_has
from codegen.llvm.objcompile import host_target_machine, optimise
from egraph_ir import op


def _table_fn(table: np.ndarray, count: int, mode: str) -> ir.Function:
    """y = table[i] + 1 over `count` indices, fused into one elementwise kernel."""
    i = ir.var("i", shape=(count,), dtype="int32")
    read = op.take(ir.const(table), i, axis=0, mode=mode)
    return ir.Function([i], op.add(read, ir.const(np.array(1, table.dtype))))


@given(
    size=st.integers(1, 256),
    kind=st.sampled_from([("uint8", 0, 255), ("int8", -128, 127), ("int32", 0, 255)]),
    mode=st.sampled_from(["fast", "clip", "wrap"]),
    count=st.integers(1, 70),
    seed=st.integers(0, 2**16),
)
def test_byte_tables_read_as_the_interpreter_does(size, kind, mode, count, seed) -> None:
    dtype, low, high = kind
    rng = np.random.default_rng(seed)
    table = rng.integers(low, high, size, endpoint=True).astype(dtype)
    if dtype == "uint8":  # the + 1 wraps in uint8 as in numpy; keep it away from the top
        table = np.minimum(table, 254).astype(dtype)
    fn = _table_fn(table, count, mode)
    indices = rng.integers(-size - 3, size + 3, count).astype("int32")
    if mode == "fast":  # take's fast mode counts negatives from the end, as numpy does
        indices = np.clip(indices, -size, size - 1)
    got = codegen.build(fn).run(i=indices)
    np.testing.assert_array_equal(got, ir.interpret(fn, indices))


def test_tables_outside_a_byte_keep_the_plain_load() -> None:
    table = np.array([0, 300, -5, 7], "int32")
    fn = _table_fn(table, 40, "clip")
    exe = codegen.build(fn)
    assert "egc_lookup" not in exe.get_source()
    indices = np.arange(-2, 38, dtype="int32") % 6
    np.testing.assert_array_equal(exe.run(i=indices), ir.interpret(fn, indices))


@pytest.mark.skipif(not host_has("avx512vbmi"), reason="the CPU has no AVX-512 VBMI byte permutes")
def test_a_vectorised_table_read_is_two_byte_permutes_not_a_gather() -> None:
    table = np.arange(256, dtype="int32")[::-1].copy()
    source = codegen.build(_table_fn(table, 4096, "fast")).get_source()
    # the source is the glue module, then the kernels' module(s): optimise the reader's
    modules = ["; ModuleID" + m for m in re.split(r"(?m)^; ModuleID", source)[1:]]
    reader = [m for m in modules if "vector-function-abi-variant" in m]
    assert len(reader) == 1
    optimised = str(optimise(reader[0], host_target_machine()))
    assert "vpermi2var.qi.512" in optimised
    assert "gather" not in optimised


def test_kernels_that_differ_only_in_their_table_are_compiled_apart() -> None:
    """Identical groups share one compiled kernel (codegen/lower/cache.py), but a table read bakes
    its table into the code: two such groups must not share."""
    x, y = (ir.var(name, shape=(64,), dtype="uint8") for name in "xy")
    first, second = (np.arange(256, dtype=np.int32) % k for k in (7, 11))
    reads = [op.take(ir.const(t), v, axis=0, mode="fast") for t, v in ((first, x), (second, y))]
    fn = ir.Function([x, y], ir.Tuple(reads))
    values = [np.arange(64, dtype=np.uint8) * 3, np.arange(64, dtype=np.uint8) * 4]
    got = codegen.build(fn).run(x=values[0], y=values[1])
    for mine, want in zip(got, ir.interpret(fn, *values), strict=True):
        np.testing.assert_array_equal(mine, want)
