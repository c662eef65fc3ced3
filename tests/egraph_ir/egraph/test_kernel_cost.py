"""The `kernels` cost model (egraph_ir/egraph/kernel_cost.py): the kind of every
convolution form, exact measured times before rates, rates by map size, conversions by
the bytes they move, measurements for another CPU ignored."""

from __future__ import annotations

import json

import numpy as np
import pytest

import egraph_ir as ir
from egraph_ir import op
from egraph_ir.egraph import KernelCost
from egraph_ir.egraph.cost import Machine
from egraph_ir.egraph.kernel_cost import (
    conv_kind,
    kernel_key,
)
from egraph_ir.measured import KernelTimes, default_path, this_cpu
from egraph_ir.registry import get_op
from egraph_ir.types import TensorType

MACHINE = Machine(peak_flops=100e9, bandwidth=10e9, overhead_s=1e-6)


def _call(body: ir.Expr, *params: ir.Var) -> ir.Call:
    fn = ir.infer_type(ir.Function(list(params), body))
    assert isinstance(fn.body, ir.Call)
    return fn.body


def _types(call: ir.Call) -> list[TensorType]:
    return [a.checked_type for a in call.args]  # type: ignore[misc]


@pytest.mark.parametrize(
    "x_shape, w_shape, attrs, kind",
    [
        ((1, 96, 14, 14), (96, 1, 3, 3), {"groups": 96, "padding": (1,)}, "conv2d/depthwise"),
        (
            (1, 96, 56, 56),
            (96, 1, 3, 3),
            {"groups": 96, "strides": (2, 2)},
            "conv2d/depthwise-strided@large",
        ),
        ((1, 96, 14, 14), (32, 96, 1, 1), {}, "conv2d/pointwise"),
        ((1, 96, 14, 14), (32, 96, 1, 1), {"strides": (2, 2)}, "conv2d"),
        ((1, 64, 56, 56), (64, 64, 3, 3), {"padding": (1,)}, "conv2d"),  # no form: no size
    ],
)
def test_each_convolution_has_its_kind(x_shape, w_shape, attrs, kind) -> None:
    x = ir.var("x", shape=x_shape)
    call = _call(op.conv2d(x, ir.const(np.zeros(w_shape, "float32")), **attrs), x)
    assert conv_kind("conv2d", *_types(call), call.attrs) == kind


def test_blocked_pointwise_kinds_say_which_side_is_nchw() -> None:
    w = ir.const(np.zeros((32, 96, 1, 1), "float32"))
    plain = ir.var("x", shape=(1, 96, 14, 14))
    blocked = ir.var("y", shape=(1, 6, 14, 14, 16))
    into = _call(op.conv2d_nchwc(plain, w, data_layout="NCHW"), plain)
    out = _call(op.conv2d_nchwc(blocked, w, out_layout="NCHW"), blocked)
    both = _call(op.conv2d_nchwc(blocked, w), blocked)
    kinds = [conv_kind("conv2d_nchwc", *_types(c), c.attrs) for c in (into, out, both)]
    assert kinds == [
        "conv2d_nchwc/pointwise-in",
        "conv2d_nchwc/pointwise-out",
        "conv2d_nchwc/pointwise",
    ]


def test_a_measured_time_wins_over_the_rate_and_a_conversion_costs_its_bytes() -> None:
    x = ir.var("x", shape=(1, 96, 14, 14))
    call = _call(op.conv2d(x, ir.const(np.zeros((96, 1, 3, 3), "float32")), groups=96), x)
    conv = get_op("conv2d")
    model = KernelCost(MACHINE, {"conv2d": 1.0, "conv2d/depthwise": 10.0}, measured=False)
    flops = conv.cost(_types(call), call.checked_type, call.attrs).flops
    estimate = model.estimate(conv, _types(call), call.checked_type, call.attrs)
    assert estimate == pytest.approx(flops / 10e3 + 1.0)  # 10 GFLOP/s, plus the overhead
    key = kernel_key("conv2d", *_types(call), call.attrs)
    timed = KernelCost(MACHINE, times={key: 5e-6}, measured=False)
    assert timed.estimate(conv, _types(call), call.checked_type, call.attrs) == pytest.approx(5.0)
    lt = get_op("layout_transform")
    attrs = {"src_layout": "NCHW", "dst_layout": "NCHW16c"}
    blocked = TensorType((1, 6, 14, 14, 16), "float32")
    bytes_moved = 2 * 96 * 14 * 14 * 4
    assert model.estimate(lt, _types(call)[:1], blocked, attrs) == pytest.approx(
        bytes_moved / (model.copy_gbs * 1e9) * 1e6 + 1.0  # at the measured copy rate
    )
    shape = get_op("reshape")  # a view: a token, as a fused elementwise op
    flat = TensorType((1, 96 * 14 * 14), "float32")
    assert model.estimate(shape, _types(call)[:1], flat, {"newshape": (1, -1)}) < 0.1


def test_the_cost_model_reads_this_cpus_store_and_ignores_another_cpus() -> None:
    store = KernelTimes(default_path(), rates={"conv2d": 123.0})
    store.record("k", {"conv/direct": 2e-6, "conv/channels": 1e-6})
    store.save()
    try:
        model = KernelCost()
        assert model.times["k"] == 1e-6 and model.gflops["conv2d"] == 123.0  # the fastest
        data = json.loads(default_path().read_text())
        default_path().write_text(json.dumps({**data, "cpu": "some other processor"}))
        this_cpu.cache_clear()
        assert "k" not in KernelCost().times
    finally:
        default_path().unlink()
        this_cpu.cache_clear()


def test_the_default_rates_are_those_of_the_hosts_vector_registers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two measured tables with the same kinds; an AVX2 host takes its own (with the
    AVX-512 one it kept MobileNetV2's 112x112 layers in NCHW, 8-13% slower)."""
    from egraph_ir.egraph import kernel_cost

    assert set(kernel_cost.AVX2_GFLOPS) == set(kernel_cost.MEASURED_GFLOPS)
    monkeypatch.setattr(kernel_cost, "host_has_vnni", lambda: True)
    for wide, table in ((True, kernel_cost.MEASURED_GFLOPS), (False, kernel_cost.AVX2_GFLOPS)):
        monkeypatch.setattr(kernel_cost, "native_16_lanes", lambda wide=wide: wide)
        assert KernelCost(measured=False).gflops == table | kernel_cost.INT8_GOPS
    # where the tables disagree on an order, the choice can differ: a large NCHW pointwise
    # layer beats the blocked one in the AVX-512 table and loses in the AVX2 one
    large = ("conv2d/pointwise@large", "conv2d_nchwc/pointwise@large")
    assert [kernel_cost.MEASURED_GFLOPS[k] for k in large] == sorted(
        (kernel_cost.MEASURED_GFLOPS[k] for k in large), reverse=True
    )
    assert [kernel_cost.AVX2_GFLOPS[k] for k in large] == sorted(
        kernel_cost.AVX2_GFLOPS[k] for k in large
    )
