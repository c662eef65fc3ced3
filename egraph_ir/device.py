"""Virtual devices: where a value is stored (and an op on it runs).

`VirtualDevice(device_type, device_id=0, target=None, memory_scope="")` names one memory:
two virtual devices are the same device only when every field is equal, so `cpu:0` in scope
"global" and `cpu:0` in scope "texture" are different devices and a value moving between
them is copied. The text format writes `VirtualDevice("cpu", 1)` (fields at their defaults
left out); `VirtualDevice.parse("cpu:1")` reads the short form used by configs and the CLI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import CompilerError

_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_SHORT = re.compile(r"(?P<type>[A-Za-z][A-Za-z0-9_]*)(?::(?P<id>\d+))?(?:/(?P<scope>.+))?")


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """A device type ("cpu", "cuda", ...), its index, an optional target and memory scope."""

    device_type: str
    device_id: int = 0
    target: str | None = None
    memory_scope: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.device_type, str) or not _TYPE.fullmatch(self.device_type):
            raise CompilerError(
                f"VirtualDevice: device_type must be a name such as 'cpu', got {self.device_type!r}"
            )
        if isinstance(self.device_id, bool) or not isinstance(self.device_id, int):
            raise CompilerError(f"VirtualDevice: device_id must be an int, got {self.device_id!r}")
        if self.device_id < 0:
            raise CompilerError(f"VirtualDevice: device_id must be >= 0, got {self.device_id}")
        if self.target is not None and not isinstance(self.target, str):
            raise CompilerError(f"VirtualDevice: target must be a string, got {self.target!r}")
        if not isinstance(self.memory_scope, str):
            raise CompilerError(
                f"VirtualDevice: memory_scope must be a string, got {self.memory_scope!r}"
            )

    @staticmethod
    def parse(text: str) -> VirtualDevice:
        """Read `type[:id][/scope]`, e.g. "cpu", "cpu:1", "cpu:0/texture"."""
        m = _SHORT.fullmatch(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise CompilerError(
                f"cannot read a device from {text!r}; write type[:id][/scope], e.g. 'cpu:1'"
            )
        return VirtualDevice(m["type"], int(m["id"] or 0), None, m["scope"] or "")

    @property
    def name(self) -> str:
        """The short form: cpu:1, cpu:0/texture (the target is left out)."""
        scope = f"/{self.memory_scope}" if self.memory_scope else ""
        return f"{self.device_type}:{self.device_id}{scope}"

    def text(self) -> str:
        """The text-format spelling, which `egraph_ir.parse` reads back."""
        parts = [_quote(self.device_type), str(self.device_id)]
        if self.target is not None:
            parts.append(f"target={_quote(self.target)}")
        if self.memory_scope:
            parts.append(f"memory_scope={_quote(self.memory_scope)}")
        return f"VirtualDevice({', '.join(parts)})"

    def __str__(self) -> str:
        return self.name


def as_device(value: VirtualDevice | str) -> VirtualDevice:
    """A VirtualDevice from itself or its short form ("cpu:1")."""
    return value if isinstance(value, VirtualDevice) else VirtualDevice.parse(value)


def _quote(s: str) -> str:
    import json

    return json.dumps(s)


__all__ = ["VirtualDevice", "as_device"]
