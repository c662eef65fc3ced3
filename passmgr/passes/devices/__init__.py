"""Device planning: every expression gets a device, copies go where values cross."""

from __future__ import annotations

from .plan import DevicePlanReport, PlanDevices, analyse, device_map

__all__ = ["DevicePlanReport", "PlanDevices", "analyse", "device_map"]
