"""Reshapes inside fused kernels map indices group by group (codegen/lower/compute/definitions.py
axis_groups): a split axis is an affine sum, only merged axes divide. Checked on random
splits, merges and regroupings, around transposes and slices (a transformer's head split)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
from codegen.lower.compute.definitions import axis_groups
from egraph_ir import op


def test_axis_groups_pair_equal_products() -> None:
    assert axis_groups((1, 197, 192), (1, 197, 3, 64)) == [
        ((0,), (0,)),
        ((1,), (1,)),
        ((2,), (2, 3)),
    ]
    assert axis_groups((6, 4), (4, 6)) == [((0, 1), (0, 1))]
    assert axis_groups((2, 1, 3), (6,)) == [((0, 1, 2), (0,))]
    assert axis_groups((4, 1), (4,)) == [((0, 1), (0,))]


@st.composite
def reshapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(input shape, output shape, a permutation of the output) from shuffled factors."""
    factors = draw(st.lists(st.sampled_from([1, 2, 3, 4, 5]), min_size=1, max_size=5))

    def group(fs: list[int]) -> tuple[int, ...]:
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(fs) - 1)), max_size=len(fs) - 1)))
        parts = [fs[a:b] for a, b in zip([0, *cuts], [*cuts, len(fs)], strict=True)]
        return tuple(int(np.prod(p)) for p in parts if p)

    a, b = group(factors), group(factors)
    perm = tuple(draw(st.permutations(range(len(b)))))
    return a, b, perm


@given(reshapes(), st.booleans(), st.integers(0, 2**16))
def test_reshape_between_transposes_and_slices_matches_the_interpreter(case, sliced, seed) -> None:
    a, b, perm = case
    shape = (*a[:-1], a[-1] * 2) if sliced else a
    x = ir.var("x", shape=shape)
    body = op.strided_slice(x, begin=[0] * len(a), end=list(a)) if sliced else x
    body = op.transpose(op.reshape(op.exp(body), newshape=b), axes=perm)
    fn = ir.Function([x], op.multiply(body, body))
    value = np.random.default_rng(seed).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(codegen.build(fn).run(x=value), ir.interpret(fn, x=value), rtol=1e-6)


@given(reshapes(), st.integers(0, 2**16))
def test_a_kernel_ending_in_a_reshape_runs_over_the_finer_shape(case, seed) -> None:
    """A group whose result is a reshape of a transpose iterates the transpose's shape
    (codegen/lower/nests.py before_reshapes): the same elements at the same offsets."""
    a, b, perm = case
    x = ir.var("x", shape=b)
    moved = op.transpose(op.exp(x), axes=perm)
    fn = ir.Function([x], op.reshape(moved, newshape=a))
    value = np.random.default_rng(seed).standard_normal(b).astype("float32")
    np.testing.assert_allclose(codegen.build(fn).run(x=value), ir.interpret(fn, x=value), rtol=1e-6)


def test_image_patches_are_cut_as_whole_rows() -> None:
    """The patch cut of a 16x16-window convolution: (1, 3, 224, 224) as 196 rows of 768."""
    x = ir.var("x", shape=(1, 3, 224, 224))
    six = op.reshape(x, newshape=(1, 3, 14, 16, 14, 16))
    fn = ir.Function(
        [x], op.reshape(op.transpose(six, axes=(0, 2, 4, 1, 3, 5)), newshape=(196, 768))
    )
    value = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
    expected = value.reshape(1, 3, 14, 16, 14, 16).transpose(0, 2, 4, 1, 3, 5).reshape(196, 768)
    np.testing.assert_array_equal(codegen.build(fn).run(x=value), expected)


@pytest.mark.parametrize("num_newaxis", [1, 2, 3])
def test_a_0d_tensor_given_axes_of_extent_1_reads_its_one_element(num_newaxis: int) -> None:
    """A 0-d parameter through expand_dims (or a reshape) into a broadcast: the output's
    axes of extent 1 map to no input axis (repro reliability-4 zero_d_expand_dims: a raw
    ValueError from the index arithmetic)."""
    mod = ir.parse(f"""def @main(%p0: Tensor[(4, 3), int64], %p1: int64) {{
  %0 = expand_dims(%p1, axis=0, num_newaxis={num_newaxis});
  %1 = add(-1i64, %0);
  %2 = reshape(%p1, newshape=[1, 1]);
  add(add(zeros_like(%1), %1), multiply(%p0, %2))
}}""")
    args = (np.arange(12, dtype=np.int64).reshape(4, 3), np.array(5, np.int64))
    np.testing.assert_array_equal(codegen.build(mod).run(*args), ir.interpret(mod, *args))
