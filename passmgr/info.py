"""PassInfo: what the pass manager needs to know about a pass."""

from __future__ import annotations

from dataclasses import dataclass

from .names import PASS_NAMES


@dataclass(frozen=True, slots=True)
class PassInfo:
    """What the manager needs to know about a pass.

    `always_run` passes (analyses such as InferType) are not counted or skipped by bisection.
    """

    name: str
    opt_level: int = 0
    required: tuple[str, ...] = ()
    always_run: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.required, str) or not isinstance(self.required, tuple | list):
            raise TypeError(
                f"required must be a list or tuple of pass names, got {self.required!r}"
            )
        object.__setattr__(self, "required", tuple(self.required))
        PASS_NAMES.add(self.name)
