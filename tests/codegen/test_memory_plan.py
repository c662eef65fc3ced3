"""Memory planning: both planners are valid (no two live tensors overlap) and the arena
planner stays near the lower bound."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codegen.memory_plan import ALIGN, Tensor, lower_bound, make_plan


@st.composite
def lifetimes(draw) -> list[Tensor]:
    n = draw(st.integers(1, 30))
    out = []
    for i in range(n):
        first = draw(st.integers(0, 40))
        out.append(
            Tensor(i, draw(st.integers(1, 1 << 16)), first, first + draw(st.integers(0, 10)))
        )
    return out


def _overlaps(a: Tensor, b: Tensor, offsets: dict[int, int]) -> bool:
    live = a.first <= b.last and b.first <= a.last
    size = lambda t: (t.nbytes + ALIGN - 1) // ALIGN * ALIGN  # noqa: E731
    space = offsets[a.id] < offsets[b.id] + size(b) and offsets[b.id] < offsets[a.id] + size(a)
    return live and space


@given(lifetimes(), st.sampled_from(["arena", "tokens"]))
def test_plans_never_overlap_live_tensors(tensors: list[Tensor], method: str) -> None:
    plan = make_plan(tensors, method)
    for i, a in enumerate(tensors):
        for b in tensors[i + 1 :]:
            assert not _overlaps(a, b, plan.offsets), (a, b)
    assert plan.lower_bound <= plan.bytes <= plan.naive
    assert plan.lower_bound == lower_bound(tensors) == _live_peak(tensors)


def _live_peak(tensors: list[Tensor]) -> int:
    """The lower bound counted step by step (independent of the planner's sweep)."""
    size = lambda t: (t.nbytes + ALIGN - 1) // ALIGN * ALIGN  # noqa: E731
    steps = range(max(t.last for t in tensors) + 1)
    return max(sum(size(t) for t in tensors if t.first <= s <= t.last) for s in steps)


def test_a_chain_reuses_two_buffers() -> None:
    chain = [Tensor(i, 1000, i, i + 1) for i in range(10)]
    for method in ("arena", "tokens"):
        plan = make_plan(chain, method)
        assert plan.bytes == 2 * 1024 == plan.lower_bound and plan.naive == 10 * 1024
