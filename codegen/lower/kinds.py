"""Kernel kinds: what one fused group became after lowering, and how it runs.

Each kind is a small type that lists the loop-IR kernels it needs compiled (`jit_kernels`),
the scratch buffers it needs planned (`scratches`), and how it runs: `native_calls()` gives
the launches and GEMMs the native runtime (codegen/runtime/runner.py) strings into one entry
function, with buffers named by `BufferRef` (a group input, a constant, the output, the scratch);
kinds that cannot run natively give a Python step instead (`python_step`).

- `LoopKernel`: one JIT loop nest (elementwise groups, reductions, softmax, pooling, small
  products), producers inlined;
- `GemmKernel`: a product through BLAS (codegen/runtime/blas.py), then the epilogue in place;
- `ConvKernel`: a JIT prologue (padding or im2col) into scratch, a JIT convolution or a
  GEMM over the columns, then the epilogue in place;
- `HostKernel`: the numpy reference, for groups without a compute definition.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from egraph_ir.dims import Dim
from egraph_ir.expr import Constant, Expr, Function, Var
from egraph_ir.interp import interpret

from ..loop_ir import (
    Kernel,
)
from ..runtime import blas

PythonStep = Callable[[list[np.ndarray], np.ndarray | None], Any]
Operand = int | np.ndarray  # a group parameter's index, or a constant array


@dataclass(frozen=True, eq=False)
class BufferRef:
    """A buffer a native call reads or writes: `input` i of the group, a `constant`, the
    group's `out`put or its `scratch`."""

    kind: str
    index: int = 0
    array: np.ndarray | None = None

    @staticmethod
    def operand(value: Operand) -> BufferRef:
        if isinstance(value, int):
            return BufferRef("input", value)
        return BufferRef("constant", array=np.require(value, requirements="C"))  # keeps 0-d


OUT, SCRATCH = BufferRef("out"), BufferRef("scratch", 0)


@dataclass
class Launch:
    """A JIT kernel over its outer extent, buffers in the kernel's order; its scalar
    buffers (codegen/lower/scalars.py) are bound here, after the ones given."""

    kernel: Kernel
    buffers: list[BufferRef]

    def __post_init__(self) -> None:
        scalars = [BufferRef("constant", array=a) for a in self.kernel.scalars.values()]
        self.buffers = [*self.buffers, *scalars]


@dataclass
class Gemm:
    """c = a @ b as described by `product` (BLAS dtypes only)."""

    product: blas.Product | blas.SizedProduct
    a: BufferRef
    b: BufferRef
    c: BufferRef


@dataclass
class Repeat:
    """`calls` once per item of a leading size (`count`, read from the sizes when it
    runs), each buffer moved on by its bytes per item (`strides`, by kind and index:
    ("input", i), ("out", 0); any other, weights and scratch, is shared)."""

    calls: list[Launch | Gemm]
    count: Dim
    strides: dict[tuple[str, int], int]


NativeCall = Launch | Gemm | Repeat


def kernel_label(kind: str, variant: str) -> str:
    """A kernel's NAME from its kind and variant ("conv" + "direct": "conv/direct")."""
    return f"{kind}/{variant}" if variant else kind


class CompiledKernel(ABC):
    """A lowered fused group."""

    kind: ClassVar[str]
    name: str
    ops: list[str]
    scratches: tuple[tuple[tuple[int | Dim, ...], str], ...] = ()  # shape and dtype of each scratch

    @abstractmethod
    def jit_kernels(self) -> list[Kernel]:
        """The loop-IR kernels to emit and compile."""

    def native_calls(self) -> list[NativeCall] | None:
        """The calls that run this group natively (None: use python_step)."""
        return None

    def python_step(self) -> PythonStep:
        raise NotImplementedError(f"{self.kind} kernels run natively")

    @property
    def kernel_name(self) -> str:
        """The kernel's NAME as profiles and reports show it ("conv/direct", "loops")."""
        return kernel_label(self.kind, getattr(self, "variant", ""))


@dataclass
class LoopKernel(CompiledKernel):
    """One loop nest over buffers (inputs..., constants..., out)."""

    kind: ClassVar[str] = "loops"
    name: str
    ops: list[str]
    kernel: Kernel
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # buffer name -> array
    special: dict[str, BufferRef] = field(default_factory=dict)  # other named buffers (scratch)

    def jit_kernels(self) -> list[Kernel]:
        return [self.kernel]

    def native_calls(self) -> list[NativeCall]:
        refs = []
        for k, b in enumerate(self.kernel.buffers):
            if b.name in self.kernel.scalars:
                continue  # bound by the Launch
            if b.name in self.constants:
                refs.append(BufferRef("constant", array=self.constants[b.name]))
            elif b.name == "out":
                refs.append(OUT)
            elif b.name in self.special:
                refs.append(self.special[b.name])
            else:
                refs.append(BufferRef("input", k))
        return [Launch(self.kernel, refs)]


@dataclass
class JitGemmKernel(LoopKernel):
    """A product on weights packed at compile time, with its epilogue
    (codegen/lower/kernels/gemm/packed.py); an int8 one (codegen/lower/kernels/gemm/int8.py) sums
    into an int32 scratch first."""

    kind: ClassVar[str] = "gemm"
    scratches: tuple[tuple[tuple[int | Dim, ...], str], ...] = ()
    variant: str = ""  # "int8" for byte products


def _epilogue(epilogue: LoopKernel | None) -> list[NativeCall]:
    return epilogue.native_calls() if epilogue is not None else []


@dataclass
class GemmKernel(CompiledKernel):
    """float dense / matmul / batch_matmul through BLAS, then the fused epilogue over the
    result (integer products are JIT loops, see lower/driver.py)."""

    kind: ClassVar[str] = "blas"
    name: str
    ops: list[str]
    # None: a symbolic group's, given once the sizes are
    product: blas.Product | blas.SizedProduct | None
    operands: tuple[Operand, Operand]
    epilogue: LoopKernel | None = None

    def jit_kernels(self) -> list[Kernel]:
        return self.epilogue.jit_kernels() if self.epilogue else []

    def native_calls(self) -> list[NativeCall]:
        assert self.product is not None, "a symbolic product is bound to its sizes first"
        a, b = (BufferRef.operand(x) for x in self.operands)
        return [Gemm(self.product, a, b, OUT), *_epilogue(self.epilogue)]


@dataclass
class ConvKernel(CompiledKernel):
    """conv2d: a prologue (padding, stride phases or im2col) from one input into scratch 0,
    then a JIT convolution (scratch, weights, out) or a GEMM of the weights with the columns
    (the input itself for 1x1), then the epilogue. For the direct micro-kernel, anchor and
    gemm are None: the epilogue kernel is the convolution and its epilogue in one."""

    kind: ClassVar[str] = "conv"
    name: str
    ops: list[str]
    source: int  # the group parameter the prologue (or a 1x1 GEMM) reads
    weights: Operand
    prologue: Kernel | None
    anchor: Kernel | None  # grouped_kernel's direct loops
    scratches: tuple[tuple[tuple[int | Dim, ...], str], ...] = ()
    gemm: blas.Product | None = None
    epilogue: LoopKernel | None = None  # for the direct kernel: the convolution itself too
    variant: str = ""  # which convolution kernel: direct, channels, gemm, im2col, grouped

    def jit_kernels(self) -> list[Kernel]:
        own = [k for k in (self.prologue, self.anchor) if k is not None]
        return own + (self.epilogue.jit_kernels() if self.epilogue else [])

    def native_calls(self) -> list[NativeCall]:
        source, weights = BufferRef("input", self.source), BufferRef.operand(self.weights)
        calls: list[NativeCall] = []
        if self.prologue is not None:
            calls.append(Launch(self.prologue, [source, SCRATCH]))
        if self.anchor is not None:
            calls.append(Launch(self.anchor, [SCRATCH, weights, OUT]))
        elif self.gemm is not None:
            columns = SCRATCH if self.prologue is not None else source
            calls.append(Gemm(self.gemm, weights, columns, OUT))
        return calls + _epilogue(self.epilogue)


@dataclass
class RepeatedKernel(CompiledKernel):
    """A group lowered for one item of its leading size and run once per item
    (codegen/lower/per_item.py): a convolution over a symbolic batch, say."""

    kind: ClassVar[str] = "items"
    name: str
    ops: list[str]
    inner: CompiledKernel  # the group at one item: every choice static
    count: Dim
    strides: dict[tuple[str, int], int]  # bytes per item of the group's inputs and output

    @property
    def scratches(self) -> tuple[tuple[tuple[int | Dim, ...], str], ...]:  # type: ignore[override]
        return self.inner.scratches  # one item's, reused by the next

    @property
    def variant(self) -> str:
        return self.inner.kernel_name

    def jit_kernels(self) -> list[Kernel]:
        return self.inner.jit_kernels()

    def native_calls(self) -> list[NativeCall]:
        calls = self.inner.native_calls()
        assert calls is not None and not any(isinstance(c, Repeat) for c in calls)
        return [Repeat(calls, self.count, self.strides)]  # type: ignore[arg-type]


@dataclass
class HostKernel(CompiledKernel):
    """A group evaluated with the ops' numpy references (no compute definition)."""

    kind: ClassVar[str] = "host"
    name: str
    ops: list[str]
    function: Function

    def jit_kernels(self) -> list[Kernel]:
        return []

    def python_step(self) -> PythonStep:
        fn = self.function

        def step(inputs: list[np.ndarray], out: np.ndarray | None) -> Any:
            result = interpret(fn, *inputs)
            if out is None:  # a tuple result
                return tuple(np.require(r, requirements="C") for r in result)  # 0-d stays 0-d
            out[...] = result
            return out

        return step


@dataclass
class ExternalKernel(CompiledKernel):
    """A region partitioned for another target, run by that target's code generator
    (codegen/external): its runner reads the inputs and writes the outputs in place."""

    kind: ClassVar[str] = "external"
    name: str
    ops: list[str]
    function: Function  # the region (Compiler=<target>), kept for saving and reports
    runner: Callable[[list[np.ndarray], list[np.ndarray]], None]
    out_types: list[tuple[tuple[int, ...], str]] = field(default_factory=list)

    @property
    def target(self) -> str:
        return str(self.function.attrs["Compiler"])

    def jit_kernels(self) -> list[Kernel]:
        return []

    def python_step(self) -> PythonStep:
        runner, types = self.runner, self.out_types

        def step(inputs: list[np.ndarray], out: np.ndarray | None) -> Any:
            if out is not None:
                runner(inputs, [out])
                return out
            outs = [np.empty(shape, dtype) for shape, dtype in types]  # a tuple result
            runner(inputs, outs)
            return tuple(outs)

        return step


def operand(x: Expr, params: tuple[Var, ...]) -> int | np.ndarray:
    """A library argument: the index of a group parameter, or a constant array."""
    if isinstance(x, Constant):
        return np.ascontiguousarray(x.data)
    assert isinstance(x, Var)
    return params.index(x)


class Unsupported(Exception):
    """No native kernel for this group (it runs on the host, or fails without fallback)."""
