"""ONNX import: a ModelProto (or a path) to an IRModule with one function, `main`.

Graph inputs become parameters (initialisers listed as inputs stay constants), initialisers
become constants, nodes become calls in graph order. Inputs that ONNX passes as tensors but
the IR keeps as attributes (Reshape's shape, Slice's starts, Unsqueeze's axes, Clip's bounds,
...) must be constants; calls whose inputs are all constants are folded on the way, so shape
arithmetic (Shape -> Gather -> Concat -> Reshape) resolves. Opsets 13 to 21 of the default
domain are accepted. Every unsupported op is reported in one error, with its node names.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from .. import op
from ..attrs import Attrs
from ..errors import CompilerError, ConstantInputError, FrontendError
from ..expr import Constant, Expr, Function, Tuple, TupleGetItem, Var
from ..fold import fold
from ..infer import infer_new_nodes, infer_type
from ..module import IRModule
from ..types import DTYPES, FLOAT_DTYPES, TensorType
from ..visitor import free_vars
from .onnx_functions import expand, function_schema

MIN_OPSET, MAX_OPSET = 13, 21  # the opsets the converters are written against
OLDEST_OPSET = 7  # older models are converted up to MIN_OPSET by onnx.version_converter

Converter = Callable[["_Node"], Expr | list[Expr]]
CONVERTERS: dict[str, Converter] = {}


def converter(*names: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for name in names:
            CONVERTERS[name] = fn
        return fn

    return register


def supported_ops() -> list[str]:
    return sorted(CONVERTERS)


# ---------------------------------------------------------------- entry point
def from_onnx(model_or_path: Any, shapes: dict[str, tuple[int, ...]] | None = None) -> IRModule:
    """Import an ONNX model. `shapes` fixes graph inputs whose dimensions are symbolic."""
    onnx = _onnx()
    model = _load(model_or_path, onnx)
    _check(model, onnx)
    declared = _declared_opset(model)
    if declared is None:  # only other domains (ai.onnx.ml, training): name their ops
        other: dict[str, list[str]] = {}
        for i, node in enumerate(model.graph.node):
            other.setdefault(f"{node.domain}.{node.op_type}", []).append(node.name or f"#{i}")
        raise FrontendError(
            f"the model imports no ai.onnx opset; unsupported ONNX ops: {_listing(other)}"
        )
    model, opset = _supported_opset(model, onnx)
    graph = model.graph
    unsupported: dict[str, list[str]] = {}
    for i, node in enumerate(graph.node):
        if node.op_type not in CONVERTERS and function_schema(node, declared or opset, onnx):
            continue  # expanded into its function body when converted
        if node.domain not in ("", "ai.onnx") or node.op_type not in CONVERTERS:
            key = (
                node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            )
            unsupported.setdefault(key, []).append(node.name or f"#{i}")
    if unsupported:
        raise FrontendError(f"unsupported ONNX ops: {_listing(unsupported)}")
    names = {i.name for i in graph.input} - {init.name for init in graph.initializer}
    unknown = sorted(set(shapes or {}) - names)
    if unknown:
        raise FrontendError(
            f"shapes= names {unknown}, which are not graph inputs; the inputs: {sorted(names)}"
        )
    return _Importer(onnx, graph, opset, shapes or {}, declared or opset).run()


def _declared_opset(model: Any) -> int | None:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _listing(nodes_by_op: dict[str, list[str]], shown: int = 3) -> str:
    """'Op x2 (nodes: a, b); ...' with at most `shown` node names per op."""
    parts = []
    for op_type, names in sorted(nodes_by_op.items()):
        more = f", ... {len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{op_type} x{len(names)} (nodes: {', '.join(names[:shown])}{more})")
    return "; ".join(parts)


def _check(model: Any, onnx: Any) -> None:
    """Each node the importer converts is checked against its ONNX schema (input and output
    counts, attribute names and types) by ONNX's own checker; the graph must have outputs
    and define every name once. (The whole-model check is stricter than ONNX Runtime: it
    refuses graph outputs without shapes, which exporters and users write.)"""
    graph = model.graph
    if not graph.output:
        raise FrontendError("not a valid ONNX model: the graph has no outputs")
    defined: set[str] = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    for i, node in enumerate(graph.node):
        where = f"node '{node.name or f'#{i}'}' ({node.op_type})"
        for name in node.output:
            if name and name in defined:
                raise FrontendError(f"{where}: output '{name}' is already defined")
            defined.add(name)
        if node.domain not in ("", "ai.onnx") or node.op_type not in CONVERTERS:
            continue  # reported as unsupported with the others
        if any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute):
            continue  # a body may read enclosing values, which check_node cannot be told of
        try:
            onnx.checker.check_node(node, ctx)
        except (onnx.checker.ValidationError, ValueError) as exc:
            first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
            raise FrontendError(f"{where}: not a valid node: {first.strip()}") from None


def _supported_opset(model: Any, onnx: Any) -> tuple[Any, int]:
    """The model at an opset the converters read, and that opset. Opsets 7-12 are converted
    up to 13; newer opsets than 21 are read as 21 where every node's operator is unchanged
    since (the error names the operators that changed)."""
    opset = _declared_opset(model)
    newest = int(onnx.defs.onnx_opset_version())
    if opset is None or not OLDEST_OPSET <= opset <= newest:
        raise FrontendError(
            f"ONNX opset {opset} is not supported; supported: {OLDEST_OPSET} to {newest}"
        )
    if opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as exc:  # the converter raises RuntimeError/ValueError/its own
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise FrontendError(f"cannot convert opset {opset} to {MIN_OPSET}: {first}") from None
        return model, MIN_OPSET
    if opset > MAX_OPSET:
        changed = sorted({p for node in model.graph.node if (p := _changed(node, opset, onnx))})
        if changed:
            raise FrontendError(
                f"opset {opset}: operators changed after opset {MAX_OPSET}, which the importer "
                f"reads: {'; '.join(changed)}"
            )
        return model, MAX_OPSET
    return model, opset


def _changed(node: Any, opset: int, onnx: Any) -> str:
    """Why `node` cannot be read as its opset-21 definition ('' when it can). Opsets 22-28
    mostly added element types (bfloat16, float8, int4): the inputs, outputs and attributes
    stay, so a node that sets no new attribute means the same at opset 21."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in CONVERTERS:
        return ""  # reported as unsupported later
    try:
        new = onnx.defs.get_schema(node.op_type, opset)
    except Exception:  # not an operator of that opset
        return f"{node.op_type} (not defined at opset {opset})"
    try:
        old = onnx.defs.get_schema(node.op_type, MAX_OPSET)
    except Exception:  # an operator added after opset 21: its converter reads the new one
        return ""
    if new.since_version <= MAX_OPSET:
        return ""
    if [i.name for i in new.inputs] != [i.name for i in old.inputs] or len(new.outputs) != len(
        old.outputs
    ):
        return f"{node.op_type} (its inputs changed in opset {new.since_version})"
    added = sorted({a.name for a in node.attribute} - set(old.attributes))
    if added:
        return f"{node.op_type} (attribute {', '.join(added)} of opset {new.since_version})"
    return ""


def _onnx() -> Any:
    import onnx
    import onnx.checker
    import onnx.version_converter

    return onnx


def _load(model_or_path: Any, onnx: Any) -> Any:
    if isinstance(model_or_path, str | Path):
        path = Path(model_or_path)
        if not path.is_file():
            raise FrontendError(f"{path}: no such ONNX file")
        try:
            return onnx.load(str(path))
        except Exception as exc:  # protobuf decode errors have no common base class
            raise FrontendError(f"{path}: not a readable ONNX model ({exc})") from None
    if isinstance(model_or_path, bytes):
        try:
            return onnx.load_from_string(model_or_path)
        except Exception as exc:
            raise FrontendError(f"not a readable ONNX model ({exc})") from None
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    raise FrontendError(f"from_onnx takes a ModelProto, bytes or a path, got {model_or_path!r}")


# ---------------------------------------------------------------- the importer
class _Importer:
    def __init__(
        self, onnx: Any, graph: Any, opset: int, shapes: dict, function_opset: int
    ) -> None:
        self.onnx, self.graph, self.opset, self.shapes = onnx, graph, opset, shapes
        self.function_opset = function_opset  # the model's own: function bodies are built at it
        self.env: dict[str, Expr] = {}
        self.expansions = 0

    def run(self) -> IRModule:
        self._initializers(self.graph)
        params = []
        for value_info in self.graph.input:
            if value_info.name in self.env:
                continue  # an initialiser listed as input (older exporters): a constant
            v = Var(value_info.name, self._input_type(value_info))
            self.env[value_info.name] = v
            params.append(v)
        self._nodes(self.graph.node)
        outputs = self._outputs(self.graph)
        body = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
        names = tuple(out.name for out in self.graph.output)
        fn = Function(tuple(params), body, attrs=Attrs({"output_names": names}))
        return infer_type(IRModule({"main": fn}))

    def run_graph(self, graph: Any, bindings: dict[str, Expr]) -> list[Expr]:
        """A subgraph's outputs (a Scan body, an If branch): its inputs bound to `bindings`,
        the enclosing graph's values visible, nothing it defines leaking out."""
        child = _Importer(self.onnx, graph, self.opset, {}, self.function_opset)
        child.env = {**self.env, **bindings}
        child.expansions = self.expansions
        child._initializers(graph)
        child._nodes(graph.node)
        self.expansions = child.expansions
        return child._outputs(graph)

    def _initializers(self, graph: Any) -> None:
        for init in graph.initializer:
            try:
                self.env[init.name] = Constant(self.onnx.numpy_helper.to_array(init).copy())
            except (TypeError, KeyError, ValueError) as exc:
                raise FrontendError(f"initializer '{init.name}' is malformed ({exc})") from None

    def _outputs(self, graph: Any) -> list[Expr]:
        outputs = []
        for out in graph.output:
            if out.name not in self.env:
                raise FrontendError(f"graph output '{out.name}' is not produced by any node")
            outputs.append(self.env[out.name])
        return outputs

    def _nodes(self, nodes: Any) -> None:
        pending = [(node, "") for node in reversed(nodes)]  # a stack: the next one is last
        index = 0
        while pending:
            node, inside = pending.pop()
            index += 1
            if node.op_type not in CONVERTERS and node.domain in ("", "ai.onnx"):
                expanded = self._expand(node, inside)
                pending.extend((n, inside or f"{node.op_type} ") for n in reversed(expanded))
                continue
            try:
                parsed = _Node(self, node, index - 1)
            except (TypeError, KeyError, IndexError, ValueError) as exc:
                where = f"node '{node.name or f'#{index - 1}'}' ({node.op_type})"
                raise FrontendError(f"{where}: bad attribute ({exc})") from None
            if inside:
                parsed.where = f"{parsed.where} in the function body of {inside.strip()}"
            self._convert(parsed)

    def _expand(self, node: Any, inside: str) -> list[Any]:
        """A function op's body nodes (onnx_functions.py); an op that is neither converted
        nor a function (possible only inside a body) is unsupported."""
        where = f"node '{node.name or node.op_type}' ({node.op_type})"
        if function_schema(node, self.function_opset, self.onnx) is None:
            body_of = f" in the function body of {inside.strip()}" if inside else ""
            raise FrontendError(f"{where}{body_of}: unsupported ONNX op {node.op_type}")
        types: list[TensorType | None] = []
        for name in node.input:
            t = infer_new_nodes(self.env[name]).checked_type if name in self.env else None
            types.append(t if isinstance(t, TensorType) else None)
        self.expansions += 1
        try:
            return expand(node, types, self.function_opset, self.onnx, f"_f{self.expansions}/")
        except FrontendError as exc:
            raise FrontendError(f"{where}: {exc}") from None

    def _input_type(self, value_info: Any) -> TensorType:
        t = value_info.type.tensor_type
        try:
            dtype = str(self.onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        except (KeyError, ValueError):
            dtype = f"element type {t.elem_type}"
        if dtype not in DTYPES:
            raise FrontendError(
                f"input '{value_info.name}' is {dtype}, which the IR does not have; "
                f"supported: {', '.join(DTYPES)}"
            )
        if value_info.name in self.shapes:
            return TensorType(tuple(self.shapes[value_info.name]), dtype)
        dims = []
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                raise FrontendError(
                    f"input '{value_info.name}' has a symbolic dimension "
                    f"'{d.dim_param or '?'}'; pass shapes={{'{value_info.name}': (...)}}"
                )
            dims.append(d.dim_value)
        return TensorType(tuple(dims), dtype)

    def _convert(self, node: _Node) -> None:
        try:
            result = CONVERTERS[node.op_type](node)
            results = result if isinstance(result, list) else [result]
            results = [fold(infer_new_nodes(r)) for r in results]  # shape arithmetic resolves
        except ConstantInputError as exc:
            raise ConstantInputError(f"{node.where}: {exc}", exc.tensor, exc.inputs) from None
        except FrontendError as exc:
            raise FrontendError(f"{node.where}: {exc}") from None
        except CompilerError as exc:
            raise FrontendError(f"{node.where}: {exc}") from None
        except (TypeError, KeyError, IndexError, ValueError, ArithmeticError, RuntimeError) as exc:
            # a node the checker let through but its converter cannot read (a missing or
            # out-of-range attribute, a short tensor): named, never a traceback
            raise FrontendError(
                f"{node.where}: cannot convert ({type(exc).__name__}: {exc})"
            ) from None
        for name, value in zip(node.proto.output, results, strict=False):
            if name:
                self.env[name] = value


class _Node:
    """One ONNX node: its inputs as IR, its attributes as Python values."""

    def __init__(self, importer: _Importer, proto: Any, index: int) -> None:
        self.importer, self.proto, self.opset = importer, proto, importer.opset
        self.op_type = proto.op_type
        self.where = f"node '{proto.name or f'#{index}'}' ({proto.op_type})"
        helper = importer.onnx.helper
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        for k, v in self.attrs.items():
            if isinstance(v, bytes):
                self.attrs[k] = v.decode()
            elif isinstance(v, importer.onnx.TensorProto):
                self.attrs[k] = importer.onnx.numpy_helper.to_array(v)

    def input(self, i: int) -> Expr | None:
        names = self.proto.input
        if i >= len(names) or not names[i]:
            return None
        if names[i] not in self.importer.env:
            raise FrontendError(f"input '{names[i]}' is not defined before this node")
        return self.importer.env[names[i]]

    def x(self, i: int = 0) -> Expr:
        e = self.input(i)
        if e is None:
            raise FrontendError(f"input {i} is required")
        return e

    def inputs(self) -> list[Expr]:
        return [self.x(i) for i in range(len(self.proto.input)) if self.proto.input[i]]

    def const(self, i: int, default: Any = None) -> Any:
        """A constant input's value (shapes, axes, bounds); None when absent."""
        e = self.input(i)
        if e is None:
            return default
        if not isinstance(e, Constant):
            raise ConstantInputError(
                f"input {i} ('{self.proto.input[i]}') must be a constant: it sets a static "
                "attribute",
                self.proto.input[i],
                tuple(v.name_hint for v in free_vars(e)),
            )
        return e.data

    def type(self, i: int = 0) -> TensorType:
        t = infer_new_nodes(self.x(i)).checked_type
        if not isinstance(t, TensorType):
            raise FrontendError(f"input {i} is not a tensor")
        return t

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)


# ---------------------------------------------------------------- converters
_UNARY = {
    "Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Erf": "erf", "Abs": "abs", "Neg": "negative", "Floor": "floor",
    "Ceil": "ceil", "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos",
    "Not": "logical_not", "BitwiseNot": "bitwise_not", "Acos": "acos", "Asin": "asin",
    "Atan": "atan", "Acosh": "acosh", "Asinh": "asinh", "Atanh": "atanh",
}  # fmt: skip
_BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}  # fmt: skip


@converter(*_UNARY)
def _unary(n: _Node) -> Expr:
    return op.call(_UNARY[n.op_type], n.x())


@converter(*_BINARY)
def _binary(n: _Node) -> Expr:
    a, b = n.x(0), n.x(1)
    dtype = n.type(0).dtype
    if n.op_type == "Pow" and dtype not in FLOAT_DTYPES:  # integers: exact in float64
        wide = op.power(op.cast(a, dtype="float64"), op.cast(b, dtype="float64"))
        return op.cast(wide, dtype=dtype)
    if n.op_type == "Pow" and n.type(1).dtype != dtype:
        b = op.cast(b, dtype=dtype)
    return op.call(_BINARY[n.op_type], a, b)


@converter("Max", "Min", "Sum", "Mean")
def _variadic(n: _Node) -> Expr:
    name = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[n.op_type]
    xs = n.inputs()
    out = xs[0]
    for x in xs[1:]:
        out = op.call(name, out, x)
    if n.op_type == "Mean":
        out = op.divide(out, Constant(np.asarray(len(xs), dtype=n.type(0).dtype)))
    return out


@converter("Reciprocal")
def _reciprocal(n: _Node) -> Expr:
    return op.divide(Constant(np.asarray(1, dtype=n.type().dtype)), n.x())


@converter("Identity")
def _identity(n: _Node) -> Expr:
    return n.x()


@converter("Dropout")
def _dropout(n: _Node) -> list[Expr]:
    training = n.const(2, np.asarray(False))
    if bool(np.asarray(training)):
        raise FrontendError("training_mode=True is not supported (inference only)")
    t = n.type()
    return [n.x(), Constant(np.ones(t.shape, dtype=bool))]  # inference: identity, full mask


@converter("LeakyRelu")
def _leaky_relu(n: _Node) -> Expr:
    return op.leaky_relu(n.x(), alpha=float(n.attr("alpha", 0.01)))


@converter("Gelu")
def _gelu(n: _Node) -> Expr:
    return op.gelu(n.x(), approximate=n.attr("approximate", "none"))


@converter("Where")
def _where(n: _Node) -> Expr:
    return op.where(n.x(0), n.x(1), n.x(2))


@converter("Clip")
def _clip(n: _Node) -> Expr:
    low, high = n.const(1), n.const(2)
    a_min = float(low) if low is not None else float(n.attr("min", -np.inf))
    a_max = float(high) if high is not None else float(n.attr("max", np.inf))
    return op.clip(n.x(), a_min=a_min, a_max=a_max)


@converter("Cast")
def _cast(n: _Node) -> Expr:
    dtype = str(n.importer.onnx.helper.tensor_dtype_to_np_dtype(n.attr("to")))
    return cast(n, n.x(), dtype)


def cast(n: _Node, x: Expr, dtype: str) -> Expr:
    """Cast and CastLike: a float cast to a float8 format saturates by default (values
    beyond its largest finite value, infinities included, clip to it)."""
    source = n.type(0).dtype
    if dtype.startswith("float8") and source in FLOAT_DTYPES and n.attr("saturate", 1):
        top = float(ml_dtypes.finfo(dtype).max)
        x = op.clip(x, a_min=-top, a_max=top)
    return op.cast(x, dtype=dtype)


@converter("Constant")
def _constant(n: _Node) -> Expr:
    for key, dtype in (("value", None), ("value_float", "float32"), ("value_floats", "float32"),
                       ("value_int", "int64"), ("value_ints", "int64")):  # fmt: skip
        if key in n.attrs:
            return Constant(np.asarray(n.attrs[key], dtype=dtype))
    raise FrontendError(f"Constant with attributes {sorted(n.attrs)} is not supported")


@converter("Shape")
def _shape(n: _Node) -> Expr:
    shape = n.type().shape
    start, end = n.attr("start", 0), n.attr("end", None)
    return Constant(np.asarray(shape[start:end], dtype=np.int64))


@converter("MatMul")
def _matmul(n: _Node) -> Expr:
    return op.matmul(n.x(0), n.x(1))


@converter("Gemm")
def _gemm(n: _Node) -> Expr:
    a, b = n.x(0), n.x(1)
    if n.attr("transA", 0):
        a = op.transpose(a, axes=(1, 0))
    out = op.dense(a, b) if n.attr("transB", 0) else op.matmul(a, b)
    dtype = n.type(0).dtype
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if alpha != 1.0:
        out = op.multiply(out, Constant(np.asarray(alpha, dtype=dtype)))
    c = n.input(2)
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = op.multiply(c, Constant(np.asarray(beta, dtype=dtype)))
        out = op.add(out, c)
    return out


def _pads(n: _Node, x: TensorType, kernel: tuple[int, ...], strides, dilations) -> tuple:
    """ONNX pads [begin..., end...], also from auto_pad SAME_UPPER/SAME_LOWER."""
    auto = n.attr("auto_pad", "NOTSET")
    spatial = x.ndim - 2
    if auto in ("NOTSET", "VALID"):
        return tuple(n.attr("pads", [0] * 2 * spatial)) if auto == "NOTSET" else (0,) * 2 * spatial
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise FrontendError(f"auto_pad={auto} is not supported")
    begin, end = [], []
    for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return (*begin, *end)


class _Window:
    """A convolution's or pooling's input and window, 1-D (NCL) lifted to 2-D (NC1L): the
    2-D ops compute it with a window of height 1; `finish` drops the added axis again."""

    def __init__(self, n: _Node, kernel: Any = None) -> None:
        t = n.type()
        if t.ndim not in (3, 4):
            raise FrontendError(
                f"only 1-D (NCL), 2-D (NCHW) and, for Conv and pooling, 3-D (NCDHW) "
                f"{n.op_type} are supported, got input {t}"
            )
        spatial = t.ndim - 2
        kernel = tuple(n.attr("kernel_shape", kernel))
        strides = tuple(n.attr("strides", [1] * spatial))
        dilations = tuple(n.attr("dilations", [1] * spatial))
        pads = _pads(n, t, kernel, strides, dilations)
        self.one_d = spatial == 1
        self.x = n.x()
        if self.one_d:
            self.x = op.expand_dims(self.x, axis=2)
            kernel, strides, dilations = (1, *kernel), (1, *strides), (1, *dilations)
            pads = (0, pads[0], 0, pads[1])
        self.kernel, self.strides, self.dilations, self.pads = kernel, strides, dilations, pads

    def lift(self, e: Expr) -> Expr:
        return op.expand_dims(e, axis=2) if self.one_d else e

    def finish(self, e: Expr) -> Expr:
        return op.squeeze(e, axis=(2,)) if self.one_d else e


@converter("Conv")
def _conv(n: _Node) -> Expr:
    if n.type().ndim == 5:
        from .onnx_volume import conv3d

        return conv3d(n)
    win = _Window(n, n.type(1).shape[2:])
    out = op.conv2d(
        win.x,
        win.lift(n.x(1)),
        strides=win.strides,
        padding=win.pads,
        dilation=win.dilations,
        groups=int(n.attr("group", 1)),
    )
    bias = n.input(2)
    out = op.bias_add(out, bias, axis=1) if bias is not None else out
    return win.finish(out)


@converter("MaxPool", "AveragePool")
def _pool(n: _Node) -> Expr:
    if n.type().ndim == 5:
        from .onnx_volume import pool3d

        if len(n.proto.output) > 1 and n.proto.output[1]:
            raise FrontendError("MaxPool's Indices output is not supported")
        return pool3d(n)
    win = _Window(n)
    common = {
        "pool_size": win.kernel,
        "strides": win.strides,
        "padding": win.pads,
        "dilation": win.dilations,
        "ceil_mode": bool(n.attr("ceil_mode", 0)),
    }
    if n.op_type == "MaxPool":
        if len(n.proto.output) > 1 and n.proto.output[1]:
            raise FrontendError("MaxPool's Indices output is not supported")
        return win.finish(op.max_pool2d(win.x, **common))
    include = bool(n.attr("count_include_pad", 0))
    return win.finish(op.avg_pool2d(win.x, **common, count_include_pad=include))


@converter("GlobalAveragePool")
def _global_avg_pool(n: _Node) -> Expr:
    t = n.type()
    if t.ndim < 3:
        raise FrontendError(f"GlobalAveragePool needs (N, C, ...), got input {t}")
    return (
        op.mean(n.x(), axis=tuple(range(2, t.ndim)), keepdims=True)
        if t.ndim != 4
        else (op.global_avg_pool2d(n.x()))
    )


@converter("GlobalMaxPool")
def _global_max_pool(n: _Node) -> Expr:
    t = n.type()
    if t.ndim < 3:
        raise FrontendError(f"GlobalMaxPool needs (N, C, ...), got input {t}")
    return op.max(n.x(), axis=tuple(range(2, t.ndim)), keepdims=True)


@converter("BatchNormalization")
def _batch_norm(n: _Node) -> Expr:
    if n.attr("training_mode", 0):
        raise FrontendError("training_mode=1 is not supported (inference only)")
    bn = op.batch_norm(
        n.x(0), n.x(1), n.x(2), n.x(3), n.x(4), axis=1, epsilon=float(n.attr("epsilon", 1e-5))
    )
    return TupleGetItem(bn, 0)


@converter("LayerNormalization")
def _layer_norm(n: _Node) -> list[Expr]:
    t = n.type()
    axis = n.attr("axis", -1) % t.ndim
    eps = float(n.attr("epsilon", 1e-5))
    gamma = n.x(1)
    if any(o for o in n.proto.output[1:]):  # Mean and InvStdDev over the normalised axes
        axes = tuple(range(axis, t.ndim))
        mean = op.mean(n.x(), axis=axes, keepdims=True)
        centred = op.subtract(n.x(), mean)
        var = op.mean(op.multiply(centred, centred), axis=axes, keepdims=True)
        inv_std = op.rsqrt(op.add(var, Constant(np.asarray(eps, dtype=t.dtype))))
        normed = op.multiply(centred, inv_std)
        normed = op.multiply(normed, gamma)
        beta_in = n.input(2)
        if beta_in is not None:
            normed = op.add(normed, beta_in)
        return [normed, mean, inv_std]
    beta = n.input(2)
    if beta is None:
        beta = Constant(np.zeros(n.type(1).shape, dtype=t.dtype))
    if axis == t.ndim - 1:
        return [op.layer_norm(n.x(), gamma, beta, axis=-1, epsilon=eps)]
    inner = int(np.prod(t.shape[axis:]))  # normalise over several trailing axes: flatten them
    flat = op.reshape(n.x(), newshape=(*t.shape[:axis], inner))
    g, b = op.reshape(gamma, newshape=(inner,)), op.reshape(beta, newshape=(inner,))
    normed = op.layer_norm(flat, g, b, axis=-1, epsilon=eps)
    return [op.reshape(normed, newshape=t.shape)]


@converter("Softmax", "LogSoftmax")
def _softmax(n: _Node) -> Expr:
    name = "softmax" if n.op_type == "Softmax" else "log_softmax"
    return op.call(name, n.x(), axis=int(n.attr("axis", -1)))


@converter("Reshape")
def _reshape(n: _Node) -> Expr:
    t = n.type()
    shape = [int(d) for d in n.const(1)]
    if not n.attr("allowzero", 0):
        shape = [t.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return op.reshape(n.x(), newshape=tuple(shape))


@converter("Flatten")
def _flatten(n: _Node) -> Expr:
    return op.flatten(n.x(), axis=int(n.attr("axis", 1)))


@converter("Transpose")
def _transpose(n: _Node) -> Expr:
    perm = n.attr("perm")
    return op.transpose(n.x(), axes=tuple(perm) if perm is not None else None)


def _axes(n: _Node, index: int) -> list[int] | None:
    """Axes from the attribute (older opsets) or the constant input `index` (newer)."""
    if "axes" in n.attrs:
        return [int(a) for a in n.attrs["axes"]]
    value = n.const(index)
    return None if value is None else [int(a) for a in np.asarray(value).reshape(-1)]


@converter("Unsqueeze")
def _unsqueeze(n: _Node) -> Expr:
    t = n.type()
    axes = _axes(n, 1) or []
    rank = t.ndim + len(axes)
    if any(not -rank <= a < rank for a in axes):
        raise FrontendError(f"axes {axes} out of range for rank {rank}")
    where = sorted({a % rank for a in axes})
    if len(where) != len(axes):
        raise FrontendError(f"axes {axes} repeat an axis")
    dims = iter(t.shape)
    shape = tuple(1 if i in where else next(dims) for i in range(rank))
    return op.reshape(n.x(), newshape=shape)


@converter("Squeeze")
def _squeeze(n: _Node) -> Expr:
    axes = _axes(n, 1)
    return op.squeeze(n.x(), axis=tuple(axes) if axes is not None else None)


@converter("Concat")
def _concat(n: _Node) -> Expr:
    return op.concatenate(*n.inputs(), axis=int(n.attr("axis")))


@converter("Split")
def _split(n: _Node) -> list[Expr]:
    t = n.type()
    axis = int(n.attr("axis", 0))
    sizes = n.const(1)
    if sizes is None and "split" in n.attrs:
        sizes = n.attrs["split"]
    outputs = len(n.proto.output)
    if sizes is None:
        dim = t.shape[axis]
        step = -(-dim // outputs)  # ONNX: the last piece may be smaller
        sizes = [min(step, dim - i * step) for i in range(outputs)]
    cuts = tuple(int(c) for c in np.cumsum(np.asarray(sizes, dtype=np.int64))[:-1])
    parts = op.split(n.x(), indices_or_sections=cuts, axis=axis)
    return [TupleGetItem(parts, i) for i in range(outputs)]


@converter("Slice")
def _slice(n: _Node) -> Expr:
    starts = [int(v) for v in n.const(1)]
    ends = [int(v) for v in n.const(2)]
    axes = n.const(3)
    steps = n.const(4)
    return op.strided_slice(
        n.x(),
        begin=tuple(starts),
        end=tuple(ends),
        strides=tuple(int(v) for v in steps) if steps is not None else None,
        axes=tuple(int(v) for v in axes) if axes is not None else None,
    )


@converter("Gather")
def _gather(n: _Node) -> Expr:
    indices = n.x(1)
    if isinstance(indices, Constant):
        dim = n.type().shape[int(n.attr("axis", 0))]
        indices = Constant(np.where(indices.data < 0, indices.data + dim, indices.data))
    return op.take(n.x(), indices, axis=int(n.attr("axis", 0)), mode="fast")


@converter("GatherElements")
def _gather_elements(n: _Node) -> Expr:
    return op.gather_elements(n.x(0), n.x(1), axis=int(n.attr("axis", 0)), mode="fast")


@converter("ConstantOfShape")
def _constant_of_shape(n: _Node) -> Expr:
    shape = tuple(int(d) for d in np.asarray(n.const(0)).reshape(-1))
    if any(d < 0 for d in shape):
        raise FrontendError(f"negative dimension in shape {list(shape)}")
    value = n.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1:
        raise FrontendError(f"value must hold one element, got {fill.size}")
    return Constant(np.full(shape, fill[0], dtype=fill.dtype))


@converter("Expand")
def _expand(n: _Node) -> Expr:
    t = n.type()
    target = tuple(int(d) for d in n.const(1))
    ndim = max(len(target), t.ndim)
    a = (1,) * (ndim - t.ndim) + t.shape
    b = (1,) * (ndim - len(target)) + target
    shape = tuple(x if y == 1 else y for x, y in zip(a, b, strict=True))
    return op.broadcast_to(n.x(), shape=shape)


@converter("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd")
def _reduce(n: _Node) -> Expr:
    name = n.op_type[len("Reduce") :].lower()
    axes = _axes(n, 1)
    if not axes and n.attr("noop_with_empty_axes", 0):  # absent or empty: nothing to reduce
        return n.x()
    keep = bool(n.attr("keepdims", 1))
    return op.call(name, n.x(), axis=tuple(axes) if axes else None, keepdims=keep)


@converter("ArgMax")
def _argmax(n: _Node) -> Expr:
    if n.attr("select_last_index", 0):
        from .onnx_scan import last_index

        return last_index(n, n.x())
    return op.argmax(n.x(), axis=int(n.attr("axis", 0)), keepdims=bool(n.attr("keepdims", 1)))


@converter("Pad")
def _pad(n: _Node) -> Expr:
    t = n.type()
    pads = [int(p) for p in n.const(1)]
    value = n.const(2)
    axes = n.const(3)
    axes_list = [int(a) % t.ndim for a in axes] if axes is not None else list(range(t.ndim))
    k = len(axes_list)
    width = [(0, 0)] * t.ndim
    for j, a in enumerate(axes_list):
        width[a] = (pads[j], pads[j + k])
    mode = n.attr("mode", "constant")
    pad_value = float(np.asarray(value).reshape(-1)[0]) if value is not None else 0.0
    return op.pad(n.x(), pad_width=tuple(width), pad_value=pad_value, pad_mode=mode)
