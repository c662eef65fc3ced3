"""Layout conversions between NCHW and NCHW16c as register transposes
(codegen/lower/convert.py): equal to the interpreter both ways, for batches, many channel
blocks and maps whose pixel count is no multiple of 16; smaller maps keep element loops."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from egraph_ir import op


def _convert(shape: tuple[int, ...], src: str, dst: str) -> ir.Function:
    x = ir.var("x", shape=shape)
    return ir.Function([x], op.layout_transform(x, src_layout=src, dst_layout=dst))


@given(
    n=st.integers(1, 2),
    blocks=st.integers(1, 3),
    h=st.integers(1, 9),
    w=st.integers(2, 19),
    to_blocks=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conversions_transpose_in_registers_as_the_interpreter_converts(
    n, blocks, h, w, to_blocks, seed
) -> None:
    shape = (n, 16 * blocks, h, w) if to_blocks else (n, blocks, h, w, 16)
    layouts = ("NCHW", "NCHW16c") if to_blocks else ("NCHW16c", "NCHW")
    fn = _convert(shape, *layouts)
    value = np.random.default_rng(seed).standard_normal(shape).astype("float32")
    exe = codegen.build(fn)
    assert ("shufflevector" in exe.get_source()) == (h * w >= 16)
    np.testing.assert_array_equal(exe.run(x=value), ir.interpret(fn, value))
