"""Outputs written into storage the caller keeps from run to run (ONNX Runtime's IO
binding): `Executable.run_into(buffers, **inputs)`.

A run allocates its outputs (`np.empty`), and an allocation of more than a few hundred
kilobytes is fresh memory from the kernel: every page faults and is zeroed on first write.
A decoder's presents are the largest outputs it has (GPT-2 small at a past of 1,024: 24
tensors of 3 MB) and grow each token, so they are new memory every step: measured here,
76 ms a token for writing 75 MB into fresh arrays against 11 ms into kept ones.

`OutputBuffers` keeps, per output, flat storage that grows (doubling) to the largest size
asked for and hands out C-contiguous views of its start at each run's shapes; `sets` sets
of it take turns, so the outputs of one run stay valid while the next runs (a decoder
feeds step t's presents as step t+1's past: two sets). Arrays of the caller's own can be
given by name instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from egraph_ir.errors import CodegenError


class OutputBuffers:
    """Kept storage for a program's outputs; see the module docstring."""

    def __init__(self, sets: int = 2, arrays: Mapping[str, np.ndarray] | None = None) -> None:
        if sets < 1:
            raise CodegenError(f"OutputBuffers needs at least one set, got {sets}")
        self.sets = sets
        self.arrays = dict(arrays or {})  # fixed arrays by output name, used every run
        self._storage: list[dict[str, np.ndarray]] = [{} for _ in range(sets)]
        self._turn = 0

    @property
    def kept_bytes(self) -> int:
        """The storage held, every set (not counting the caller's own arrays)."""
        return sum(a.nbytes for store in self._storage for a in store.values())

    def take(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """Where output `name` of this run goes: the caller's array (checked), else a view
        of this set's storage for it, grown if it is too small."""
        if name in self.arrays:
            return _checked(name, self.arrays[name], shape, dtype)
        size = math.prod(shape) * np.dtype(dtype).itemsize
        store = self._storage[self._turn]
        flat = store.get(name)
        if flat is None or flat.nbytes < size:
            grown = max(size, 2 * flat.nbytes) if flat is not None else size
            flat = store[name] = np.empty(max(grown, 1), np.uint8)
        return flat[:size].view(dtype).reshape(shape)

    def finish_run(self) -> None:
        """The next run writes the next set (the views this one gave stay valid until
        the set comes round again)."""
        self._turn = (self._turn + 1) % self.sets


def _checked(name: str, array: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    ok = (
        isinstance(array, np.ndarray)
        and array.shape == tuple(shape)
        and array.dtype == dtype
        and array.flags.c_contiguous
        and array.flags.writeable
    )
    if not ok:
        got = (
            f"{array.dtype}{list(array.shape)}"
            + ("" if array.flags.c_contiguous else ", not C-contiguous")
            + ("" if array.flags.writeable else ", read-only")
            if isinstance(array, np.ndarray)
            else type(array).__name__
        )
        raise CodegenError(
            f"output '{name}' goes into a writeable C-contiguous {np.dtype(dtype)}"
            f"{list(shape)} array here; got {got}"
        )
    return array


__all__ = ["OutputBuffers"]
