"""Device annotations: where a value lives and where it moves (TVM's on_device, device_copy).

`on_device(x, virtual_device, constrain_result=False, constrain_body=True)` says x is
computed on `virtual_device`; with `constrain_result` its result stays there too (the fixed
form PlanDevices writes), without it the value may be copied to wherever its users run.
Both flags False is the free form: no constraint, but a copy may go here if needed.
`device_copy(x, src_virtual_device, dst_virtual_device)` moves x between devices. Both are
the identity in the interpreter; PlanDevices (passmgr) gives every expression a device.
"""

from __future__ import annotations

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, register_op
from ..types import TensorType, Type
from ._common import per_output_element


def _same(args: list[TensorType], attrs: Attrs) -> Type:
    return args[0]


ON_DEVICE = register_op(
    Op(
        name="on_device",
        inputs=("data",),
        infer=_same,
        reference=lambda x, **attrs: x,
        pattern=OpPattern.OPAQUE,
        flops=per_output_element(0.0),
        attrs=(
            AttrSpec("virtual_device", "device"),
            AttrSpec("constrain_result", "bool", False),
            AttrSpec("constrain_body", "bool", True),
        ),
        doc="the value is computed on virtual_device (and kept there with constrain_result)",
        annotation=True,
    )
)

DEVICE_COPY = register_op(
    Op(
        name="device_copy",
        inputs=("data",),
        infer=_same,
        reference=lambda x, **attrs: x,
        pattern=OpPattern.OPAQUE,
        flops=per_output_element(0.0),
        attrs=(AttrSpec("src_virtual_device", "device"), AttrSpec("dst_virtual_device", "device")),
        doc="copy the value from src_virtual_device to dst_virtual_device",
        annotation=True,
    )
)

DEVICE_OPS = ("on_device", "device_copy")
