"""Kernel kinds: what one fused group became after lowering, and how it runs.

Each kind is a small type that lists the loop-IR kernels it needs compiled (`jit_kernels`),
the scratch buffer it needs planned (`scratch`), and binds itself to a runtime (`bind`),
which resolves compiled functions, constants and buffer addresses once and returns the
step the runtime calls on every run: `step(inputs, out)`.

- `LoopKernel`: one JIT loop nest (elementwise groups, reductions, softmax, pooling, small
  products), producers inlined;
- `GemmKernel`: a product through BLAS (codegen/blas.py), then the epilogue in place;
- `ConvKernel`: a JIT prologue (padding or im2col) into scratch, a JIT convolution or a
  GEMM over the columns, then the epilogue in place;
- `HostKernel`: the numpy reference, for groups without a compute definition.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from egraph_ir.expr import Function
from egraph_ir.interp import interpret

from . import blas
from .loop_ir import Kernel

Step = Callable[[list[np.ndarray], np.ndarray], Any]
Operand = int | np.ndarray  # a group parameter's index, or a constant array


class Launcher(Protocol):
    """What a kernel needs from the runtime it is bound to."""

    def function(self, kernel: Kernel) -> Callable[..., None]: ...

    def launch(
        self, fn: Callable[..., None], addresses: list[int], extent: int, work: float
    ) -> None:
        """Run fn(*addresses, start, end) over [0, extent), split over threads if worth it."""

    def gemm(self, product: blas.Product, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        """c = op(a) @ op(b) through BLAS, split over the thread budget."""


def _operand(value: Operand, inputs: list[np.ndarray]) -> np.ndarray:
    return inputs[value] if isinstance(value, int) else value


class CompiledKernel(ABC):
    """A lowered fused group."""

    kind: ClassVar[str]
    name: str
    ops: list[str]
    scratch: tuple[tuple[int, ...], str] | None = None  # shape and dtype of its scratch buffer

    @abstractmethod
    def jit_kernels(self) -> list[Kernel]:
        """The loop-IR kernels to emit and compile."""

    @abstractmethod
    def bind(self, runtime: Launcher, scratch: np.ndarray | None) -> Step:
        """Resolve everything that does not change between runs; return the run step."""


@dataclass
class LoopKernel(CompiledKernel):
    """One loop nest over buffers (inputs..., constants..., out)."""

    kind: ClassVar[str] = "loops"
    name: str
    ops: list[str]
    kernel: Kernel
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # buffer name -> array

    def jit_kernels(self) -> list[Kernel]:
        return [self.kernel]

    def bind(self, runtime: Launcher, scratch: np.ndarray | None) -> Step:
        fn = runtime.function(self.kernel)
        named = self.constants
        consts = [named[b.name].ctypes.data for b in self.kernel.buffers if b.name in named]
        extent, work = self.kernel.extent, self.kernel.work

        def step(inputs: list[np.ndarray], out: np.ndarray) -> None:
            addresses = [a.ctypes.data for a in inputs] + consts + [out.ctypes.data]
            runtime.launch(fn, addresses, extent, work)

        return step


def _epilogue(runtime: Launcher, epilogue: LoopKernel | None) -> Step:
    if epilogue is None:
        return lambda inputs, out: None
    return epilogue.bind(runtime, None)


@dataclass
class GemmKernel(CompiledKernel):
    """dense / matmul / batch_matmul through BLAS, then the fused epilogue over the result."""

    kind: ClassVar[str] = "blas"
    name: str
    ops: list[str]
    product: blas.Product
    operands: tuple[Operand, Operand]
    epilogue: LoopKernel | None = None

    def jit_kernels(self) -> list[Kernel]:
        return self.epilogue.jit_kernels() if self.epilogue else []

    def bind(self, runtime: Launcher, scratch: np.ndarray | None) -> Step:
        epilogue = _epilogue(runtime, self.epilogue)
        left, right = self.operands
        product = self.product

        def step(inputs: list[np.ndarray], out: np.ndarray) -> None:
            runtime.gemm(product, _operand(left, inputs), _operand(right, inputs), out)
            epilogue(inputs, out)

        return step


@dataclass
class ConvKernel(CompiledKernel):
    """conv2d: a prologue (padding or im2col) from one input into scratch, then either a JIT
    convolution (scratch, weights, out) or a GEMM of the weights with the columns, then the
    epilogue in place. Without a prologue the input itself is the column matrix (1x1)."""

    kind: ClassVar[str] = "conv"
    name: str
    ops: list[str]
    source: int  # the group parameter the prologue (or a 1x1 GEMM) reads
    weights: Operand
    prologue: Kernel | None
    anchor: Kernel | None  # a JIT convolution; None: GEMM over columns
    scratch: tuple[tuple[int, ...], str] | None = None
    gemm: blas.Product | None = None
    epilogue: LoopKernel | None = None

    def jit_kernels(self) -> list[Kernel]:
        own = [k for k in (self.prologue, self.anchor) if k is not None]
        return own + (self.epilogue.jit_kernels() if self.epilogue else [])

    def bind(self, runtime: Launcher, scratch: np.ndarray | None) -> Step:
        epilogue = _epilogue(runtime, self.epilogue)
        prologue = runtime.function(self.prologue) if self.prologue else None
        anchor = runtime.function(self.anchor) if self.anchor else None
        source, weights, gemm = self.source, self.weights, self.gemm
        pro, anc = self.prologue, self.anchor
        scratch_at = scratch.ctypes.data if scratch is not None else 0

        def step(inputs: list[np.ndarray], out: np.ndarray) -> None:
            x = inputs[source]
            if prologue is not None and pro is not None:
                runtime.launch(prologue, [x.ctypes.data, scratch_at], pro.extent, pro.work)
            w = _operand(weights, inputs)
            if anchor is not None and anc is not None:
                addresses = [scratch_at, w.ctypes.data, out.ctypes.data]
                runtime.launch(anchor, addresses, anc.extent, anc.work)
            else:
                assert gemm is not None
                columns = scratch if prologue is not None else x
                assert columns is not None
                runtime.gemm(gemm, w, columns, out)
            epilogue(inputs, out)

        return step


@dataclass
class HostKernel(CompiledKernel):
    """A group evaluated with the ops' numpy references (no compute definition)."""

    kind: ClassVar[str] = "host"
    name: str
    ops: list[str]
    function: Function

    def jit_kernels(self) -> list[Kernel]:
        return []

    def bind(self, runtime: Launcher, scratch: np.ndarray | None) -> Step:
        fn = self.function

        def step(inputs: list[np.ndarray], out: np.ndarray | None) -> Any:
            result = interpret(fn, *inputs)
            if out is None:  # a tuple result
                return tuple(np.asarray(r) for r in result)
            out[...] = result
            return out

        return step
