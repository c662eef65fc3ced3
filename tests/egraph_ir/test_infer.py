"""Type inference: whole modules, calls, Let/If/tuples, and the errors for bad programs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import egraph_ir as ir
from egraph_ir import op
from egraph_ir.testing import programs
from egraph_ir.types import FuncType, TensorType, TupleType, tensor_types


def f32(*shape: int) -> TensorType:
    return TensorType(shape, "float32")


def test_module_with_global_and_local_calls_lets_ifs_and_tuples() -> None:
    mod = ir.parse("""
    def @scale(%a: Tensor[(2, 3), float32], %k: float32) -> Tensor[(2, 3), float32] {
      multiply(%a, %k)
    }
    def @main(%x: Tensor[(2, 3), float32], %c: bool) {
      let %f = fn (%y: Tensor[(2, 3), float32]) { relu(%y) };
      let %t = (@scale(%x, 2f), %f(%x));
      if (%c) { %t.0 } else { add(%t.1, 1f) }
    }
    """)
    ir.infer_type(mod)
    main = mod["main"]
    assert main.checked_type == FuncType((f32(2, 3), TensorType((), "bool")), f32(2, 3))
    assert mod["scale"].checked_type == FuncType((f32(2, 3), TensorType((), "float32")), f32(2, 3))
    x = np.arange(6, dtype="float32").reshape(2, 3) - 2
    np.testing.assert_allclose(ir.interpret(mod, x, np.bool_(True)), x * 2)
    np.testing.assert_allclose(ir.interpret(mod, x, np.bool_(False)), np.maximum(x, 0) + 1)


def test_tuple_results_and_split() -> None:
    x = ir.var("x", shape=(4, 6))
    parts = op.split(x, indices_or_sections=3, axis=1)
    bn = op.batch_norm(x, *[ir.const(np.ones(6, "float32"))] * 4, axis=1)
    e = ir.infer_type(ir.Tuple([parts, ir.TupleGetItem(bn, 0)]))
    assert e.checked_type == TupleType((TupleType((f32(4, 2),) * 3), f32(4, 6)))


def test_recursive_globals_need_signatures() -> None:
    text = """
    def @loop(%x: Tensor[(2,), float32], %n: int32) -> Tensor[(2,), float32] {
      if (greater(%n, 0i32)) { @loop(add(%x, 1f), subtract(%n, 1i32)) } else { %x }
    }
    def @main(%x: Tensor[(2,), float32]) { @loop(%x, 3i32) }
    """
    mod = ir.infer_type(ir.parse(text))
    np.testing.assert_allclose(ir.interpret(mod, np.zeros(2, "float32")), [3, 3])
    unannotated = text.replace(" -> Tensor[(2,), float32] {", " {")
    with pytest.raises(ir.TypeInferenceError, match=r"recursively.*annotate"):
        ir.infer_type(ir.parse(unannotated))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda x: op.add(x, ir.var("w", shape=(4,))), "unbound variable %w"),
        (
            lambda x: op.add(x, ir.const(np.ones((4,), "float32"))),
            r"in @main: add\(%x: Tensor\[\(2, 3\), float32\], Tensor\[\(4,\), float32\]\): cannot broadcast",
        ),
        (
            lambda x: op.add(x, ir.const(np.ones((3,), "float64"))),
            "dtypes differ: float32, float64",
        ),
        (lambda x: op.dense(x, ir.const(np.ones((5, 4), "float32"))), r"dense needs .* \(2, 3\)"),
        (lambda x: op.reshape(x, newshape=(4, 2)), r"cannot reshape \(2, 3\)"),
        (lambda x: op.sum(x, axis=(3,)), "axis 3 out of range for rank 2"),
        (lambda x: op.log(op.cast(x, dtype="int32")), "dtype int32 not supported"),
        (lambda x: ir.TupleGetItem(x, 0), "not a tuple"),
        (lambda x: ir.If(x, x, x), "if condition must be"),
        (lambda x: op.conv2d(x, x), "conv2d needs NCHW"),
    ],
)
def test_ill_typed_programs_name_op_types_and_place(build, message: str) -> None:
    x = ir.var("x", shape=(2, 3))
    mod = ir.IRModule.from_expr(ir.Function([x], build(x)))
    with pytest.raises(ir.TypeInferenceError, match=message):
        ir.infer_type(mod)


def test_unbound_variable_is_its_own_error() -> None:
    x, y = ir.var("x", shape=(2,)), ir.var("y", shape=(2,))
    mod = ir.IRModule({"main": ir.Function([x], op.add(x, y))})
    with pytest.raises(ir.UnboundVariableError, match="unbound variable %y"):
        ir.infer_type(mod)
    with pytest.raises(ir.UnboundVariableError, match="unknown global @nope"):
        ir.infer_type(ir.parse("def @main(%x: float32) { @nope(%x) }"))


def test_checked_type_before_inference_is_a_clear_error() -> None:
    with pytest.raises(ir.TypeInferenceError, match="run infer_type first"):
        _ = op.relu(ir.var("x", shape=(2,))).checked_type


def test_unknown_op_and_bad_attributes() -> None:
    with pytest.raises(ir.UnknownOpError, match="did you mean 'multiply'"):
        op.get("mutliply")
    with pytest.raises(AttributeError, match="did you mean 'multiply'"):
        _ = op.mutliply
    x = ir.var("x", shape=(2, 3))
    with pytest.raises(ir.AttrError, match=r"unknown attribute 'axsi'.*did you mean 'axis'"):
        op.sum(x, axsi=0)
    with pytest.raises(ir.AttrError, match="'keepdims' expects a bool"):
        op.sum(x, keepdims="yes")
    with pytest.raises(ir.AttrError, match="missing required attribute 'newshape'"):
        op.reshape(x)
    with pytest.raises(ir.AttrError, match="must be one of none, tanh"):
        op.gelu(x, approximate="fast")
    with pytest.raises(ir.TypeInferenceError, match="expects 2 input"):
        ir.Call(op.get("add"), (x,))


@given(programs())
def test_inferred_types_match_what_the_interpreter_computes(case) -> None:
    out = ir.interpret(case.mod, **case.inputs)
    leaves = out if isinstance(out, tuple) else (out,)
    types = tensor_types(case.mod["main"].body.checked_type)
    assert [(a.shape, str(a.dtype)) for a in leaves] == [(t.shape, t.dtype) for t in types]


@pytest.mark.parametrize("call", ["avg_pool2d(%x, pool_size=[2, 2], padding=[-1, -1, -1, -1])",
                                  "conv2d(%x, %x, padding=[0, -1])"])  # fmt: skip
def test_negative_padding_is_a_type_error(call: str) -> None:
    mod = ir.parse(f"def @main(%x: Tensor[(1, 1, 4, 4), float32]) {{ {call} }}")
    with pytest.raises(ir.CompilerError, match="padding must not be negative"):
        ir.infer_type(mod)
