"""Device planning: every expression gets a device, copies go where values cross."""

from __future__ import annotations

from .plan import PlanDevices, analyse, device_map

__all__ = ["PlanDevices", "analyse", "device_map"]
