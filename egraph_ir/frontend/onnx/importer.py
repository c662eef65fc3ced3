"""ONNX import: a ModelProto (or a path) to an IRModule with one function, `main`.

Graph inputs become parameters (initialisers listed as inputs stay constants), initialisers
become constants, nodes become calls in graph order through the registered converters
(node.py). Inputs that ONNX passes as tensors but the IR keeps as attributes (Reshape's
shape, Slice's starts, Unsqueeze's axes, Clip's bounds, ...) must be constants; calls whose
inputs are all constants are folded on the way, so shape arithmetic (Shape -> Gather ->
Concat -> Reshape) resolves. Opsets 13 to 21 of the default domain are accepted (older
ones are converted up). Every unsupported op is reported in one error, with its node names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ...attrs import Attrs
from ...dims import Dim, size_var
from ...errors import CompilerError, ConstantInputError, FrontendError, Span
from ...expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from ...fold import fold
from ...infer import infer_new_nodes, infer_type
from ...module import IRModule
from ...types import DTYPES, TensorType
from .control import loop_globals
from .functions import expand, function_schema
from .node import CONVERTERS, Node, op_key
from .ort_islands import FLOAT_SUFFIX, UINT8_SUFFIX, FloatIslands, float_islands
from .quantize import dequantized
from .sizes import SizeValues, evaluate, size_node

MIN_OPSET, MAX_OPSET = 13, 21  # the opsets the converters are written against


OLDEST_OPSET = 7  # older models are converted up to MIN_OPSET by onnx.version_converter


# ---------------------------------------------------------------- entry point
def _size_name(dim_param: str) -> str:
    """An ONNX dim_param as a size variable's name (letters, digits and _ only)."""
    name = re.sub(r"\W", "_", dim_param)
    return name if name[:1].isalpha() or name[:1] == "_" else f"d_{name}"


def from_onnx(
    model_or_path: Any,
    shapes: dict[str, tuple[int, ...]] | None = None,
    *,
    onnxruntime_float_groups: bool = True,
) -> IRModule:
    """Import an ONNX model. An input's symbolic dimensions (dim_param) become size
    variables of the IR (egraph_ir/dims.py); `shapes` fixes them instead. Shape arithmetic
    over symbolic sizes (a Shape node of such a tensor) is not imported yet: there the
    error asks for `shapes`. Quantised groups ONNX Runtime's x86 build leaves in float stay
    float (egraph_ir/frontend/onnx/ort_islands.py) unless `onnxruntime_float_groups` is
    False: then the quantize rules make every group an integer op (faster, not its bits)."""
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
        key = op_key(node)
        if key not in CONVERTERS and function_schema(node, declared or opset, onnx):
            continue  # expanded into its function body when converted
        if key not in CONVERTERS:
            unsupported.setdefault(key, []).append(node.name or f"#{i}")
    if unsupported:
        raise FrontendError(f"unsupported ONNX ops: {_listing(unsupported)}")
    names = {i.name for i in graph.input} - {init.name for init in graph.initializer}
    unknown = sorted(set(shapes or {}) - names)
    if unknown:
        raise FrontendError(
            f"shapes= names {unknown}, which are not graph inputs; the inputs: {sorted(names)}"
        )
    _check_shapes(graph, shapes or {})
    importer = Importer(onnx, graph, opset, shapes or {}, declared or opset)
    return importer.run(onnxruntime_float_groups)


MAX_INPUT_ELEMENTS = 2**34  # a shapes= input past this (64 GiB of float32) is a typo


def _check_shapes(graph: Any, shapes: dict[str, Any]) -> None:
    """shapes= may fix symbolic dimensions only: a static one that differs is refused here
    (ONNX Runtime would refuse the model later), and so is an input too large to hold."""
    for given in graph.input:
        if given.name not in shapes:
            continue
        want = tuple(int(d) for d in shapes[given.name])
        dims = given.type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(want):
            raise FrontendError(
                f"shapes={{'{given.name}': {list(want)}}}: the input has rank {len(dims)}"
            )
        for k, (d, w) in enumerate(zip(dims, want, strict=False)):
            if d.HasField("dim_value") and d.dim_value != w:
                raise FrontendError(
                    f"shapes={{'{given.name}': {list(want)}}}: dimension {k} is static "
                    f"({d.dim_value}); shapes= sets only symbolic dimensions"
                )
        if any(w < 0 for w in want) or int(np.prod(want, dtype=np.float64)) > MAX_INPUT_ELEMENTS:
            raise FrontendError(
                f"shapes={{'{given.name}': {list(want)}}}: not a size an input can have "
                f"(at most {MAX_INPUT_ELEMENTS} elements)"
            )


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
            continue  # reported as unsupported with the others, or another domain's op
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
class Importer:
    def __init__(
        self, onnx: Any, graph: Any, opset: int, shapes: dict, function_opset: int
    ) -> None:
        self.onnx, self.graph, self.opset, self.shapes = onnx, graph, opset, shapes
        self.function_opset = function_opset  # the model's own: function bodies are built at it
        self.env: dict[str, Expr | SizeValues] = {}  # SizeValues: sizes.py
        self.expansions = 0
        self.islands = FloatIslands()  # groups ONNX Runtime leaves in float (ort_islands.py)

    def run(self, onnxruntime_float_groups: bool = True) -> IRModule:
        self._initializers(self.graph)
        if onnxruntime_float_groups:
            output_names = {out.name for out in self.graph.output}
            self.islands = float_islands(self.graph.node, output_names, self._constant)
            for name, zero in self.islands.uint8_zeros.items():
                self.env[name + UINT8_SUFFIX] = Constant(zero)
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
        return infer_type(IRModule(loop_globals(fn)))

    def run_graph(self, graph: Any, bindings: dict[str, Expr]) -> list[Expr]:
        """A subgraph's outputs (a Scan body, an If branch): its inputs bound to `bindings`,
        the enclosing graph's values visible, nothing it defines leaking out."""
        child = Importer(self.onnx, graph, self.opset, {}, self.function_opset)
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

    def _constant(self, name: str) -> np.ndarray | None:
        value = self.env.get(name)
        return value.data if isinstance(value, Constant) else None

    def _outputs(self, graph: Any) -> list[Expr]:
        outputs = []
        for out in graph.output:
            if out.name not in self.env:
                raise FrontendError(f"graph output '{out.name}' is not produced by any node")
            value = self.env[out.name]
            outputs.append(value.expr() if isinstance(value, SizeValues) else value)
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
                parsed = Node(self, node, index - 1)
            except (TypeError, KeyError, IndexError, ValueError) as exc:
                where = f"node '{node.name or f'#{index - 1}'}' ({node.op_type})"
                raise FrontendError(f"{where}: bad attribute ({exc})") from None
            if inside:
                parsed.where = f"{parsed.where} in the function body of {inside.strip()}"
            self._convert(parsed)

    def _expand(self, node: Any, inside: str) -> list[Any]:
        """A function op's body nodes (functions.py); an op that is neither converted
        nor a function (possible only inside a body) is unsupported."""
        where = f"node '{node.name or node.op_type}' ({node.op_type})"
        if function_schema(node, self.function_opset, self.onnx) is None:
            body_of = f" in the function body of {inside.strip()}" if inside else ""
            raise FrontendError(f"{where}{body_of}: unsupported ONNX op {node.op_type}")
        types: list[TensorType | None] = []
        for name in node.input:
            value = self.env.get(name)
            value = value.expr() if isinstance(value, SizeValues) else value
            t = infer_new_nodes(value).checked_type if value is not None else None
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
        dims: list[int | Dim] = []
        for axis, d in enumerate(t.shape.dim):
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            else:  # a dim_param is a size variable; an unnamed one gets a name of its own
                dims.append(size_var(_size_name(d.dim_param or f"{value_info.name}_dim{axis}")))
        return TensorType(tuple(dims), dtype)  # type: ignore[arg-type]  # Dims allowed

    def _size_arithmetic(self, node: Node) -> SizeValues | Constant | None:
        """The node's value when it computes with sizes of symbolic shapes (sizes.py)."""
        if node.proto.domain not in ("", "ai.onnx") or len(node.proto.output) != 1:
            return None
        inputs = [node.raw(i) for i in range(len(node.proto.input))]
        if not inputs:
            return None
        value = size_node(node.op_type, inputs[0], node.attrs)
        return value if value is not None else evaluate(node.op_type, inputs, node.attrs)

    def _convert(self, node: Node) -> None:
        try:
            folded = self._size_arithmetic(node)
            if folded is not None:
                self.env[node.proto.output[0]] = folded
                return
            result = CONVERTERS[op_key(node.proto)](node)
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
        span = Span("onnx", node.index + 1, name=node.proto.name or node.op_type)
        if node.proto.output[0] in self.islands.dequantized:  # also as arithmetic
            arithmetic = fold(infer_new_nodes(dequantized(node, 0, 1, 2)))
            results.append(arithmetic)
            self.env[node.proto.output[0] + FLOAT_SUFFIX] = arithmetic
        _stamp(results, span)
        for name, value in zip(node.proto.output, results, strict=False):
            if name:
                self.env[name] = value


def _stamp(results: list[Any], span: Span) -> None:
    """Give the calls a converter just built the ONNX node's span (profiles and errors
    name the node). Earlier nodes' calls already carry theirs, so the walk stops there;
    the new calls are not shared yet, so setting the field in place is safe."""
    stack = [r for r in results if isinstance(r, Expr)]
    seen: set[Expr] = set()
    while stack:
        e = stack.pop()
        if e in seen or not isinstance(e, Call | Tuple | TupleGetItem):
            continue
        seen.add(e)
        if isinstance(e, Call):
            if e.span is not None:
                continue
            object.__setattr__(e, "span", span)
            stack.extend(e.args)
        elif isinstance(e, Tuple):
            stack.extend(e.fields)
        else:
            stack.append(e.tuple_value)
