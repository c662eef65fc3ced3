"""Which calls each offload target supports (TVM's `target.<T>` op attributes).

`register_support(target, op_name, predicate=None)` declares that `target` can run calls of
an op; the predicate, when given, sees the typed call and may refuse it (a dtype it lacks,
a layout). `supports(target, call)` answers for one call: calls of composite functions
(MergeComposite) are supported by the target their name starts with (`blas.dense` ->
`blas`). The targets that ship with the project (`onnxruntime`, `blas`) are declared here as
data; their code generators live in `codegen.external`.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import CompilerError
from .expr import Call, Function
from .registry import REGISTRY, Op, get_op
from .types import tensor_types

Predicate = Callable[[Call], bool]

_SUPPORT: dict[str, dict[str, Predicate | None]] = {}


def register_support(target: str, op_name: str, predicate: Predicate | None = None) -> None:
    """Declare that `target` runs calls of `op_name` (those the predicate accepts)."""
    if not target or not isinstance(target, str) or target == "default":
        raise CompilerError(f"bad target name {target!r}: a non-empty name other than 'default'")
    get_op(op_name)  # an unknown op is an error naming the known ones
    _SUPPORT.setdefault(target, {})[op_name] = predicate


def unregister_support(target: str, op_name: str | None = None) -> None:
    """Forget one op of a target, or (op_name None) the whole target."""
    if op_name is None:
        _SUPPORT.pop(target, None)
    else:
        _SUPPORT.get(target, {}).pop(op_name, None)


def composite_target(fn: Function) -> str | None:
    """The target a composite function's name names (`dnnl.conv2d_relu` -> `dnnl`)."""
    name = fn.attrs.get("Composite")
    return str(name).split(".", 1)[0] if name else None


def supports(target: str, call: Call, strict: bool = True) -> bool:
    """May `target` run this (typed) call? A predicate that raises is a CompilerError
    naming the target, the op and the exception (a silent refusal hid a predicate reading
    the types of an untyped call); with `strict=False` it counts as a refusal (the
    placement e-graph asks about calls whose operands are stand-ins)."""
    if isinstance(call.op, Function):
        return composite_target(call.op) == target
    if not isinstance(call.op, Op):
        return False
    table = _SUPPORT.get(target, {})
    if call.op.name not in table:
        return False
    predicate = table[call.op.name]
    if predicate is None:
        return True
    try:
        return bool(predicate(call))
    except Exception as exc:
        if not strict:
            return False
        raise CompilerError(
            f"the support predicate of target '{target}' for '{call.op.name}' raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc


_NATIVE: dict[str, Predicate] = {}


def register_native_form(op_name: str, predicate: Predicate) -> None:
    """Declare that the host code generator computes the calls of `op_name` the predicate
    accepts in their own form, so a canonicalising pass leaves them alone (codegen keeps
    a qnn_conv2d its int8 kernel takes; CanonicalizeQnn lowers the others to floats)."""
    get_op(op_name)
    _NATIVE[op_name] = predicate


def has_native_form(call: Call) -> bool:
    """Whether the host code generator computes this (typed) call as it is."""
    if not isinstance(call.op, Op) or call.op.name not in _NATIVE:
        return False
    return bool(_NATIVE[call.op.name](call))


def supported_ops(target: str) -> list[str]:
    return sorted(_SUPPORT.get(target, {}))


def list_targets() -> list[str]:
    return sorted(_SUPPORT)


def dtypes_in(allowed: tuple[str, ...]) -> Predicate:
    """A predicate: every tensor the call reads or writes has one of these dtypes."""

    def predicate(call: Call) -> bool:
        types = [*(a.checked_type for a in call.args), call.checked_type]
        return all(t.dtype in allowed for ty in types for t in tensor_types(ty))

    return predicate


# ---------------------------------------------------------------- shipped targets
ONNXRUNTIME_DTYPES = ("float32", "int64", "int32", "bool")
BLAS_OPS = ("dense", "matmul", "batch_matmul")
NOT_FOR_ONNXRUNTIME = ("compiler_begin", "compiler_end")


def register_shipped_targets() -> None:
    """onnxruntime: every op the ONNX exporter writes, on the dtypes every ONNX Runtime
    kernel accepts; blas: float products. Called once the registry is complete."""
    ort = dtypes_in(ONNXRUNTIME_DTYPES)
    for name in list(REGISTRY):
        if name not in NOT_FOR_ONNXRUNTIME:
            register_support("onnxruntime", name, ort)
    blas = dtypes_in(("float32", "float64"))
    for name in BLAS_OPS:
        register_support("blas", name, blas)
