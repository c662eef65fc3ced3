"""What a kernel module gives the chooser: a `NativeKernel` strategy (a kernel that does not
fit raises kinds.Unsupported).

Every native kernel of codegen/lower/kernels/ is one strategy class: its NAME (the one
string the chooser, the tuning database, the profile and `--report` use), the fields its
layout needs, where the fused epilogue reads the anchor's result (`anchor_load`) and how
it builds (`build`). codegen/lower/select.py decides which one a group takes; the driver
only calls these two methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from ..loop_ir import LExpr

if TYPE_CHECKING:
    from egraph_ir.expr import Call

    from .compute.definitions import Index
    from .group import Group
    from .kinds import CompiledKernel


class NativeKernel(ABC):
    """A native kernel for a group's anchor with the group's epilogue fused into it."""

    NAME: ClassVar[str]
    # the kernel sums into scratch and the epilogue writes the output, so the group's
    # result may have another dtype than the anchor's (an int8 kernel's requantize)
    ANY_RESULT_DTYPE: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """The kernel's name as the profile shows it (NAME, with its variant where it has
        one)."""
        return self.NAME

    def anchor_load(self, group: Group, anchor: Call) -> Callable[[Index], LExpr] | None:
        """Where the epilogue reads the anchor's result (None: from the output, in place)."""
        return None

    @abstractmethod
    def build(self, group: Group, anchor: Call, ops: list[str]) -> CompiledKernel:
        """The compiled kernel: the anchor's loops and the group's epilogue."""
