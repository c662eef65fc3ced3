"""codegen/measure/kernel_rates.py: every convolution timed alone in each layout blocked.rules can
give it, filed for this CPU, and read back by the `kernels` cost model (the times are what
this machine gives: nothing asserts them)."""

from __future__ import annotations

import numpy as np

import egraph_ir as ir
from codegen.measure import kernel_rates
from egraph_ir import op
from egraph_ir.egraph import KernelCost
from egraph_ir.measured import default_path, this_cpu


def _block() -> ir.IRModule:
    """expand 24 -> 96 (NCHW in), depthwise 96, project 96 -> 24 (NCHW out), at 14x14."""
    rng = np.random.default_rng(0)
    x = ir.var("x", shape=(1, 24, 14, 14))
    e = op.conv2d(x, ir.const(rng.standard_normal((96, 24, 1, 1)).astype("float32")))
    d = op.conv2d(
        e, ir.const(rng.standard_normal((96, 1, 3, 3)).astype("float32")), padding=(1,), groups=96
    )
    p = op.conv2d(d, ir.const(rng.standard_normal((24, 96, 1, 1)).astype("float32")))
    return ir.infer_type(ir.IRModule.from_expr(ir.Function([x], p)))


def test_each_convolution_is_timed_in_every_layout_it_can_take_and_filed() -> None:
    result = kernel_rates.measure_and_save(_block(), rounds=1)
    assert set(result.rates) == {
        "conv2d/pointwise",
        "conv2d/depthwise",
        "conv2d_nchwc/pointwise-in",  # the expansion: 96 output channels split into blocks
        "conv2d_nchwc/pointwise-out",  # the projection: 96 input channels do
        "conv2d_nchwc/depthwise",
    }
    assert len(result.times) == 6
    assert all(s > 0 for by_name in result.times.values() for s in by_name.values())
    # each form under the NAME of the kernel that ran it, in this CPU's one store
    names = {name for by_name in result.times.values() for name in by_name}
    assert names <= {"conv/direct", "conv/channels", "conv/nchwc-depthwise", "conv/nchwc-pointwise"}
    assert result.path == default_path()
    store = this_cpu()
    assert store.times == result.times and store.rates == result.rates
    best = {k: min(v.values()) for k, v in result.times.items()}
    assert KernelCost().times == best  # what the next BlockLayout prices with
