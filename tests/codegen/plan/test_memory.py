"""Memory planning: both planners are valid (no two live tensors overlap) and the arena
planner stays near the lower bound."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from codegen.plan.memory import ALIGN, Tensor, lower_bound, make_plan


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


@given(lifetimes(), st.sampled_from(["arena", "conflicts", "hill-climb", "tokens"]))
def test_every_registered_planner_is_valid(tensors: list[Tensor], method: str) -> None:
    plan = make_plan(tensors, method)  # make_plan checks the plan itself, too
    for i, a in enumerate(tensors):
        for b in tensors[i + 1 :]:
            assert not _overlaps(a, b, plan.offsets), (a, b)
    assert plan.lower_bound <= plan.bytes


@given(lifetimes())
def test_hill_climbing_never_loses_to_the_greedy_orders(tensors: list[Tensor]) -> None:
    climbed = make_plan(tensors, "hill-climb").bytes
    assert climbed <= min(make_plan(tensors, m).bytes for m in ("arena", "conflicts"))


def test_tokens_are_reused_only_within_the_size_match_range() -> None:
    # TVM's match range: a free 2048-byte token is not reused for a 64-byte request
    big = Tensor(0, 2048, 0, 0)
    small = Tensor(1, 64, 1, 1)
    plan = make_plan([big, small], "tokens")
    assert plan.offsets[0] != plan.offsets[1] and plan.bytes == 2048 + 64
    near = Tensor(2, 1024, 1, 1)  # within 16x: reuses the big token
    plan = make_plan([big, near], "tokens")
    assert plan.offsets[0] == plan.offsets[2] and plan.bytes == 2048


def test_a_users_planner_runs_and_a_wrong_plan_is_refused() -> None:
    import numpy as np
    import pytest

    import codegen
    import egraph_ir as ir
    import passmgr as pm
    from codegen.plan.memory import PLANNERS, MemoryPlan
    from egraph_ir import op
    from egraph_ir.errors import CodegenError
    from egraph_ir.testing import assert_allclose

    def separate(tensors):  # one buffer each: valid, wasteful
        offsets, top = {}, 0
        for t in tensors:
            offsets[t.id] = top
            top += (t.nbytes + ALIGN - 1) // ALIGN * ALIGN
        return MemoryPlan(offsets, top, method="separate")

    def everything_at_zero(tensors):
        return MemoryPlan({t.id: 0 for t in tensors}, max((t.nbytes for t in tensors), default=0))

    codegen.register_memory_planner("separate", separate)
    codegen.register_memory_planner("zero", everything_at_zero)
    try:
        x = ir.var("x", shape=(64,))
        fn = ir.Function([x], op.multiply(op.exp(op.sin(x)), op.cos(op.exp(x))))
        value = np.linspace(-1, 1, 64, dtype="float32")
        with pm.PassContext(config={"codegen.memory_planner": "separate", "fuse.max_depth": 1}):
            exe = codegen.build(fn)
        assert_allclose(exe(value), ir.interpret(fn, value))  # float32 math library
        assert exe.memory_plan.bytes == exe.memory_plan.naive
        with (
            pm.PassContext(config={"codegen.memory_planner": "zero", "fuse.max_depth": 1}),
            pytest.raises(CodegenError, match="'zero' overlaps tensors"),
        ):
            codegen.build(fn)
    finally:
        PLANNERS.pop("separate"), PLANNERS.pop("zero")


def test_inputs_constants_and_outputs_have_storage_ids() -> None:
    import json

    import codegen
    from egraph_ir import models

    exe = codegen.build(models.mlp())
    nodes = json.loads(exe.graph_json)["nodes"]
    assert all(n["storage_id"] >= 0 for n in nodes if n["shape"] is not None)
    planned = exe.memory_plan.storage_sizes()
    assert planned and all(size > 0 for size in planned)


# ---------------------------------------------------------------- memory pools (TVM USMP)
@given(lifetimes(), st.sampled_from(["arena", "tokens", "hill-climb"]), st.integers(64, 1 << 17))
def test_pools_keep_within_their_sizes_and_place_every_tensor(
    tensors: list[Tensor], method: str, first_size: int
) -> None:
    from codegen.plan.memory import MemoryPool, plan_pools

    pools = (MemoryPool("fast", first_size), MemoryPool("slow"))
    fast, slow = plan_pools(tensors, method, pools)
    assert fast.bytes <= first_size
    assert sorted([*fast.offsets, *slow.offsets]) == sorted(t.id for t in tensors)
    for plan in (fast, slow):  # every arena is valid on its own
        mine = [t for t in tensors if t.id in plan.offsets]
        for i, a in enumerate(mine):
            for b in mine[i + 1 :]:
                assert not _overlaps(a, b, plan.offsets), (a, b)
    assert fast.bytes + slow.bytes >= lower_bound(tensors)


def test_pools_from_config_build_and_run_with_each_arena_in_its_limit(tmp_path) -> None:
    import codegen
    import passmgr as pm
    from egraph_ir import interpret, models
    from egraph_ir.testing import assert_allclose

    mod, x = models.cnn(), models.example_inputs("cnn")
    with pm.PassContext(config={"codegen.memory_pools": "l2:256K,ram"}):
        exe = codegen.build(mod)
    plan = exe.memory_plan
    assert list(plan.bytes_per_pool) == ["cpu:0/l2", "cpu:0/ram"]
    assert 0 < plan.bytes_per_pool["cpu:0/l2"] <= 256 * 1024
    assert plan.bytes >= plan.lower_bound and plan.bytes_per_device == {"cpu:0": plan.bytes}
    assert_allclose(exe.run(**x), interpret(mod, **x))
    exe.save(tmp_path / "cnn.egc")  # pools survive a save and load
    loaded = codegen.load(tmp_path / "cnn.egc")
    assert loaded.memory_plan.bytes_per_pool == plan.bytes_per_pool
    assert_allclose(loaded.run(**x), interpret(mod, **x))


def test_bad_pools_are_config_errors_and_a_full_last_pool_names_the_pools() -> None:
    import pytest

    import codegen
    import passmgr as pm
    from egraph_ir import models
    from egraph_ir.errors import CodegenError, ConfigError

    for spec, message in [
        ("sram:lots", "not a positive number of bytes"),
        ("a:1K,a", "repeat a name"),
        ("two words", "a name is a word"),
    ]:
        with pytest.raises(ConfigError, match=rf"codegen\.memory_pools': .*{message}"):
            pm.PassContext(config={"codegen.memory_pools": spec})
    with (
        pm.PassContext(config={"codegen.memory_pools": "tiny:1K"}),
        pytest.raises(CodegenError, match=r"do not fit in the memory pools tiny:1024"),
    ):
        codegen.build(models.cnn())
