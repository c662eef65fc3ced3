"""codegen.build: every op alone, random fused programs and the built-in models, compiled
code against the reference interpreter; bad input; executable surface."""

from __future__ import annotations

import json

import numpy as np
import pytest

import codegen
import egraph_ir as ir
import passmgr as pm
import rules
from egraph_ir import models, op
from egraph_ir.egraph.pattern import PCall, PVar
from egraph_ir.registry import get_op, list_ops
from egraph_ir.testing import assert_allclose
from passmgr.testing import check_differential
from rules.bindings import draw_structure

from ..hosts import VECTOR_FLOATS

CREATION = {"zeros": {}, "ones": {}, "full": {"fill_value": 2.5}}
# ops of attributes only (sizes as values: a static program has numbers there)
FROM_ATTRS = {
    "arange": {"start": 2, "stop": 9, "step": 3, "dtype": "float32"},
    "dim_values": {"values": (4, 5, 6), "shape": (3,)},
}
# ops whose attributes the generic rule-driven generator cannot pick: shapes and attributes
EXPLICIT = {
    "einsum": ([(3, 4), (4, 5)], {"equation": "ij,jk->ik"}),
    "topk": ([(3, 6)], {"k": 2, "axis": 1}),
    "im2col": ([(1, 3, 6, 5)], {"kernel_size": (3, 3), "padding": (1,), "pad_value": 0.5}),
}


# ops whose inputs' dtypes are too tied for the generator: (shape, dtype) per input
TYPED = {
    "qnn_add": [((2, 3), "uint8")] * 2 + [((), "float32"), ((), "uint8")] * 3,
    "qnn_sigmoid": [((2, 3), "int8")] + [((), "float32"), ((), "int8")] * 2,
    "qnn_softmax": [((2, 3, 8), "int8")] + [((), "float32"), ((), "int8")] * 2,
    "qnn_conv2d_nchwc": [((1, 2, 5, 5, 16), "uint8"), ((32, 32, 1, 1), "int8")]
    + [((), "uint8"), ((), "int8")],
}


# ops whose scales and zero points the compiled code reads as constants (a model's are):
# with scales known only at run time qnn_softmax is the float chain, a quantum apart
CONSTANT_SCALARS = {"qnn_softmax"}


def _typed_case(name: str):
    rng = np.random.default_rng(2)
    xs = [ir.var(f"a{i}", shape=s, dtype=d) for i, (s, d) in enumerate(TYPED[name])]
    values = {
        x.name_hint: rng.uniform(0.01, 0.1, s).astype(d)
        if d == "float32"
        else rng.integers(-128 if d == "int8" else 0, 128 if d == "int8" else 256, s).astype(d)
        for x, (s, d) in zip(xs, TYPED[name], strict=True)
    }
    if name not in CONSTANT_SCALARS:
        return [(ir.Function(xs, op.call(name, *xs)), values)]
    args = [x if x.type_annotation.shape else ir.const(values.pop(x.name_hint)) for x in xs]
    return [(ir.Function([x for x in xs if x in args], op.call(name, *args)), values)]


def _single_op_cases(name: str, count: int = 2):
    """Up to `count` well-typed single-op functions for `name`, with inputs."""
    o = get_op(name)
    if name in TYPED:
        return _typed_case(name)
    if name in FROM_ATTRS:
        return [(ir.Function([], op.call(name, **FROM_ATTRS[name])), {})]
    if name in CREATION:
        fn = ir.Function([], op.call(name, shape=(2, 3), **CREATION[name]))
        return [(fn, {})]
    if name in EXPLICIT:
        shapes, given = EXPLICIT[name]
        xs = [ir.var(f"a{i}", shape=shape) for i, shape in enumerate(shapes)]
        body = op.call(name, xs, **given) if o.variadic else op.call(name, *xs, **given)
        values = {x.name_hint: np.random.default_rng(1).standard_normal(shape).astype("float32")
                  for x, shape in zip(xs, shapes, strict=True)}  # fmt: skip
        return [(ir.Function(xs, body), values)]
    arity = 2 if o.variadic else len(o.inputs)
    pattern = PCall(name, tuple(PVar(f"a{i}") for i in range(arity)))
    rule = rules.parse(
        f"rule probe [t]\n    {name}({', '.join(f'?a{i}' for i in range(arity))}) => ?a0"
    )
    cases = []
    for seed in range(40):
        s = draw_structure(next(iter(rule)), pattern, np.random.default_rng(seed))
        if s is None:
            continue
        params = [
            ir.var(f"a{i}", shape=s.types[f"a{i}"].shape, dtype=s.types[f"a{i}"].dtype)
            for i in range(arity)
        ]
        attrs = {  # wildcard keys are (path, "op.attr")
            key.split(".")[-1]: value for (path, key), value in s.wildcards.items() if path == 0
        }
        try:
            body = op.call(name, *params, **attrs)
            fn = ir.infer_type(ir.Function(params, body))
        except ir.CompilerError:
            continue
        rng = np.random.default_rng(seed)
        inputs = {}
        for p in params:
            t = p.type_annotation
            kind = np.dtype(t.dtype).kind
            if kind == "f":
                inputs[p.name_hint] = rng.uniform(0.1, 3, t.shape).astype(t.dtype) * rng.choice(
                    [-1, 1], t.shape
                ).astype(t.dtype)
            elif kind == "b":
                inputs[p.name_hint] = rng.random(t.shape) < 0.5
            else:
                inputs[p.name_hint] = rng.integers(1, 5, t.shape).astype(t.dtype)
        if name in ("log", "sqrt", "rsqrt", "power"):
            inputs = {
                k: np.abs(v) + (0.5 if np.dtype(v.dtype).kind == "f" else 1)
                for k, v in inputs.items()
            }
        cases.append((fn, inputs))
        if len(cases) == count:
            break
    return cases


@pytest.mark.parametrize("name", list_ops())
def test_every_op_alone_compiles_and_matches_the_interpreter(name: str) -> None:
    cases = _single_op_cases(name)
    assert cases, f"no well-typed case generated for {name}"
    for fn, inputs in cases:
        exe = codegen.build(fn)
        expected = ir.interpret(fn, **inputs)
        with np.errstate(all="ignore"):
            assert_allclose(exe.run(**inputs), expected, what=f"{name} {fn}")


def test_random_fused_programs_match_the_interpreter() -> None:
    def build(mod):
        exe = codegen.build(mod)
        return exe.run

    report = check_differential(build, max_examples=30, name="codegen.build")
    assert report.ok, str(report)


@pytest.mark.parametrize("name", models.NAMES)
def test_built_in_models_compile_and_match(name: str) -> None:
    mod = models.get(name)
    inputs = models.example_inputs(name)
    with pm.PassContext(opt_level=3):
        exe = codegen.build(mod)
    assert_allclose(exe.run(**inputs), ir.interpret(mod, **inputs))
    plan = exe.memory_plan
    assert plan.bytes <= 1.10 * plan.lower_bound + 64 * 16, plan.summary()
    graph = json.loads(exe.graph_json)
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    assert kernels and all(
        {"storage_id", "device_index", "shape", "dtype"} <= set(n) for n in kernels
    )
    assert "define void" in exe.get_source()


def test_elementwise_model_is_one_loop_nest_without_intermediates() -> None:
    with pm.PassContext(opt_level=3):
        exe = codegen.build(models.elementwise())
    assert exe.kernel_kinds() == {"loops": 1}
    assert exe.memory_plan.bytes == 0  # nothing but the output: every producer is inlined
    assert f"<{VECTOR_FLOATS} x float>" in exe.get_optimized_source()  # the widest vectors


def test_bad_input_gets_clear_errors() -> None:
    x = ir.var("x", shape=(2, 3))
    fn = ir.Function([x], op.relu(x))
    with pytest.raises(ir.CodegenError, match="unknown target 'cuda'; supported: llvm"):
        codegen.build(fn, target="cuda")
    exe = codegen.build(fn)
    with pytest.raises(ir.CodegenError, match=r"input 'x' has shape \(3, 2\), expected \(2, 3\)"):
        exe.run(x=np.zeros((3, 2), "float32"))
    with pytest.raises(ir.CodegenError, match="missing \\['x'\\], unknown \\['y'\\]"):
        exe.run(y=np.zeros((2, 3), "float32"))
    w = ir.var("w", shape=(3,))
    g = ir.Function([x, w], op.add(x, w))
    with pytest.raises(
        ir.CodegenError, match="param 'w' is float32\\[4\\], the function expects float32\\[3\\]"
    ):
        codegen.build(g, params={"w": np.zeros(4, "float32")})
    with pytest.raises(ir.CodegenError, match="params \\['v'\\] are not parameters of main"):
        codegen.build(g, params={"v": np.zeros(3, "float32")})
    bound = codegen.build(g, params={"w": np.ones(3, "float32")})
    assert_allclose(bound.run(x=np.zeros((2, 3), "float32")), np.ones((2, 3), "float32"))


def test_ops_without_compute_definitions_fail_when_host_fallback_is_off() -> None:
    x = ir.var("x", shape=(4, 5))
    fn = ir.Function([x], op.pad(x, pad_width=((1, 1), (2, 2)), pad_mode="reflect"))
    no_fallback = pm.PassContext(config={"codegen.host_fallback": False})
    with no_fallback, pytest.raises(ir.CodegenError, match=r"no compute definition .*\(pad\)"):
        codegen.build(fn)
    exe = codegen.build(fn)
    assert exe.kernel_kinds() == {"host": 1}
    value = np.random.default_rng(0).standard_normal((4, 5)).astype("float32")
    assert_allclose(exe.run(x=value), ir.interpret(fn, value))


@pytest.mark.parametrize(
    ("mode", "indices"),
    [("clip", [-1, 0, 7, 2]), ("wrap", [-1, 0, 7, -6]), ("fast", [-1, 0, 4, -5])],
)
def test_take_modes_with_negative_and_out_of_range_indices(mode: str, indices: list[int]) -> None:
    x = ir.var("x", shape=(5, 3))
    i = ir.var("i", shape=(4,), dtype="int64")
    fn = ir.Function([x, i], op.take(x, i, axis=0, mode=mode))
    xv = np.arange(15, dtype="float32").reshape(5, 3)
    iv = np.array(indices, dtype="int64")
    assert_allclose(codegen.build(fn).run(x=xv, i=iv), ir.interpret(fn, xv, iv))


@pytest.mark.parametrize(
    "shape, middle, last",
    [
        ((2, 3, 4, 5), (6, 4, 5), (2, 12, 5)),  # leading axes merged and split, rows kept
        ((1, 6, 7, 8), (1, 2, 3, 56), (6, 7, 8)),  # only the last axis differs
        ((4, 3, 10), (2, 2, 3, 10), (12, 10)),  # split, then merged past the shared row
        ((3, 4), (12,), (2, 6)),  # nothing shared
    ],
)
def test_reshapes_inside_fused_kernels_match_the_interpreter(shape, middle, last) -> None:
    """Reshapes keep the loop indices of the trailing axes both shapes share (codegen/lower/compute/definitions.py)
    and go through a flat offset for the rest; gathered rows exercise the per-axis path."""
    x = ir.var("x", shape=shape)
    y = op.add(op.reshape(op.multiply(x, ir.const(np.float32(2))), newshape=middle), ir.const(1.0))
    y = op.exp(op.reshape(y, newshape=last))
    rows = ir.const(np.array([last[0] - 1, 0, last[0] // 2], dtype="int64"))
    fn = ir.Function([x], op.take(y, rows, axis=0))
    value = np.random.default_rng(0).standard_normal(shape).astype("float32")
    assert_allclose(codegen.build(fn).run(x=value), ir.interpret(fn, x=value))


def test_nested_tuple_outputs_keep_their_structure(tmp_path) -> None:
    # TVM's graph executor flattens (x1, ((x2, x3), x4)); here the result keeps its shape
    x = ir.var("x", shape=(2, 3))
    body = ir.Tuple([op.exp(x), ir.Tuple([ir.Tuple([op.negative(x), op.relu(x)]), op.add(x, x)])])
    fn = ir.Function([x], body)
    value = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    exe = codegen.build(fn)
    got, want = exe(value), ir.interpret(fn, value)
    assert_allclose(got, want)
    assert isinstance(got[1][0], tuple) and len(exe.output_types) == 4
    exe.save(str(tmp_path / "nested.egc"))
    assert_allclose(codegen.load(tmp_path / "nested.egc")(value), want)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_wide_unsigned_integers_compile_with_unsigned_semantics(dtype: str) -> None:
    # values above the signed range: compares, division, wrap-around and conversions must
    # treat them as unsigned
    top = np.iinfo(dtype).max
    a = ir.var("a", shape=(4,), dtype=dtype)
    b = ir.var("b", shape=(4,), dtype=dtype)
    body = ir.Tuple(
        [
            op.divide(a, b),
            op.greater(a, b),
            op.maximum(a, b),
            op.subtract(b, a),
            op.cast(a, "float64"),
        ]
    )
    fn = ir.Function([a, b], body)
    av = np.array([top, top // 2 + 3, 7, 1], dtype)
    bv = np.array([3, 2, top, 5], dtype)
    got, want = codegen.build(fn)(av, bv), ir.interpret(fn, av, bv)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_storage_only_dtypes_run_on_the_host_and_match_the_interpreter() -> None:
    """bfloat16, float8 and int4 compute through numpy (ml_dtypes), never in a JIT kernel."""
    x = ir.var("x", shape=(4, 8))
    narrow = op.cast(op.exp(op.cast(x, dtype="bfloat16")), dtype="float32")
    fn = ir.Function([x], op.add(narrow, x))
    text = str(ir.IRModule.from_expr(fn))
    assert "bfloat16" in text and ir.structural_equal(ir.parse(text)["main"], fn)
    exe = codegen.build(fn)
    assert "host" in exe.kernel_kinds()
    value = np.random.default_rng(0).standard_normal((4, 8)).astype("float32")
    np.testing.assert_array_equal(exe(value), ir.interpret(fn, value))
    with (
        pm.PassContext(config={"codegen.host_fallback": False}),
        pytest.raises(ir.CodegenError, match="do not compute in bfloat16"),
    ):
        codegen.build(fn)


def test_build_takes_an_onnx_path_or_model_proto(tmp_path) -> None:
    """The API an ONNX Runtime user types first: a file or a ModelProto, as DESIGN says."""
    pytest.importorskip("onnx")
    from egraph_ir.frontend import to_onnx

    model = to_onnx(models.mlp())
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    x = models.example_inputs("mlp")
    expected = ir.interpret(models.mlp(), **x)
    for source in (str(path), path, model):
        assert_allclose(codegen.build(source).run(**x), expected)
    with pytest.raises(ir.CodegenError, match="takes an IRModule"):
        codegen.build(42)  # type: ignore[arg-type]
