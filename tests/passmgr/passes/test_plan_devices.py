"""PlanDevices against TVM's cases (tests/python/relay/test_pass_plan_devices.py): each
input is planned and compared structurally with the expected module, planned again to
check idempotence, and, where it runs, built for two CPU devices with the device sanitizer
on and compared with the interpreter. `$C` plays TVM's CPU and `$G` its GPU (here cpu:1,
so every case also runs). Where this planner differs from TVM on purpose (one copy per
value and destination, not one per annotation) the case says so."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import codegen
import egraph_ir as ir
import passmgr as pm
from egraph_ir import op
from egraph_ir.errors import PassError
from egraph_ir.expr import Call, Function
from egraph_ir.testing import assert_allclose, assert_structural_equal, programs

from .brute_force import brute_force_cost, copied_bytes, copied_cost, value_nodes

C = ir.VirtualDevice("cpu", 0)
G = ir.VirtualDevice("cpu", 1)
CPU0, CPU1 = C, G
A = ir.VirtualDevice("cpu", 0, memory_scope="scopeA")
B = ir.VirtualDevice("cpu", 0, memory_scope="scopeB")
NAMES = {"$C": C, "$G": G, "$A": A, "$B": B}
T = "Tensor[(5, 7), float32]"


def parse(text: str) -> ir.IRModule:
    for key, vd in NAMES.items():
        text = text.replace(key, vd.text())
    return ir.infer_type(ir.parse(text.replace("$T", T)))


def plan(mod: ir.IRModule, default: ir.VirtualDevice = G) -> ir.IRModule:
    return pm.passes.PlanDevices(default=default)(mod)


def exercise(source: str, expected: str, default: ir.VirtualDevice = G, run: bool = True) -> None:
    mod, want = parse(source), parse(expected)
    planned = plan(mod, default)
    assert_structural_equal(planned, want)
    assert_structural_equal(plan(planned, default), want)  # idempotent
    if run:
        run_on_two_devices(mod, planned)
    else:  # closures and ifs over functions: the interpreter runs them
        inputs = random_inputs(mod)
        assert_allclose(ir.interpret(planned, **inputs), ir.interpret(mod, **inputs))


def random_inputs(mod: ir.IRModule, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inputs = {}
    for p in mod["main"].params:
        t = p.checked_type
        inputs[p.name_hint] = (
            rng.random(t.shape) < 0.5 if t.dtype == "bool" else rng.random(t.shape).astype(t.dtype)
        )
    return inputs


def run_on_two_devices(mod: ir.IRModule, planned: ir.IRModule) -> None:
    inputs = random_inputs(mod)
    expected = ir.interpret(mod, **inputs)
    with pm.PassContext(config={"codegen.check_devices": True}):
        exe = codegen.build(planned)
    assert_allclose(exe(**inputs), expected)


def test_plain_everything_takes_the_default() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          %0 = add(%a, %b);
          %1 = add(%c, %d);
          subtract(%0, %1)
        }""",
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T,
                  param_virtual_devices=[$G, $G, $G, $G], virtual_device=$G) {
          %0 = add(%a, %b);
          %1 = add(%c, %d);
          subtract(%0, %1)
        }""",
    )


LEFT_ADD_ON_CPU = """
    def @main(%a: $T, %b: $T, %c: $T, %d: $T,
              param_virtual_devices=[$C, $C, $G, $G], virtual_device=$G) {
      %0 = add(%a, %b);
      %1 = on_device(%0, virtual_device=$C, constrain_result=True);
      %2 = device_copy(%1, src_virtual_device=$C, dst_virtual_device=$G);
      %3 = add(%c, %d);
      subtract(%2, %3)
    }"""


def test_left_add_on_cpu_copies_its_result_to_the_default() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          %0 = add(%a, %b);
          %1 = on_device(%0, virtual_device=$C);
          %2 = add(%c, %d);
          subtract(%1, %2)
        }""",
        LEFT_ADD_ON_CPU,
    )


def test_left_add_on_cpu_via_an_explicit_copy() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          %0 = add(%a, %b);
          %1 = device_copy(%0, src_virtual_device=$C, dst_virtual_device=$G);
          %2 = add(%c, %d);
          subtract(%1, %2)
        }""",
        LEFT_ADD_ON_CPU,
    )


def test_both_adds_on_cpu() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          %0 = add(%a, %b);
          %1 = add(%c, %d);
          %2 = on_device(%0, virtual_device=$C);
          %3 = on_device(%1, virtual_device=$C);
          subtract(%2, %3)
        }""",
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T,
                  param_virtual_devices=[$C, $C, $C, $C], virtual_device=$G) {
          %0 = add(%a, %b);
          %1 = on_device(%0, virtual_device=$C, constrain_result=True);
          %2 = add(%c, %d);
          %3 = on_device(%2, virtual_device=$C, constrain_result=True);
          %4 = device_copy(%1, src_virtual_device=$C, dst_virtual_device=$G);
          %5 = device_copy(%3, src_virtual_device=$C, dst_virtual_device=$G);
          subtract(%4, %5)
        }""",
    )


def test_a_value_annotated_twice_is_copied_once() -> None:
    # TVM copies once per annotation (two device_copy of %0); one copy per value and
    # destination moves half the bytes
    exercise(
        """
        def @main(%a: $T, %b: $T) {
          %0 = add(%a, %b);
          %1 = on_device(%0, virtual_device=$C);
          %2 = on_device(%0, virtual_device=$C);
          subtract(%1, %2)
        }""",
        """
        def @main(%a: $T, %b: $T, param_virtual_devices=[$C, $C], virtual_device=$G) {
          %0 = add(%a, %b);
          %1 = on_device(%0, virtual_device=$C, constrain_result=True);
          %2 = device_copy(%1, src_virtual_device=$C, dst_virtual_device=$G);
          subtract(%2, %2)
        }""",
    )


def test_let_bound_values_flow_from_their_uses() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          let %l = add(%a, %b);
          let %r = add(%c, %d);
          %0 = on_device(%l, virtual_device=$C);
          subtract(%0, %r)
        }""",
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T,
                  param_virtual_devices=[$C, $C, $G, $G], virtual_device=$G) {
          let %l = on_device(add(%a, %b), virtual_device=$C, constrain_result=True);
          let %r = on_device(add(%c, %d), virtual_device=$G, constrain_result=True);
          %1 = device_copy(%l, src_virtual_device=$C, dst_virtual_device=$G);
          subtract(%1, %r)
        }""",
    )


def test_function_parameter_devices_flow_to_call_sites() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          let %f = fn (%x: $T, %y: $T) {
            %0 = add(%x, %y);
            on_device(%0, virtual_device=$C)
          };
          %1 = %f(%a, %b);
          %2 = add(%c, %d);
          subtract(%1, %2)
        }""",
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T,
                  param_virtual_devices=[$C, $C, $C, $C], virtual_device=$C) {
          let %f = fn (%x: $T, %y: $T, param_virtual_devices=[$C, $C], virtual_device=$C) {
            add(%x, %y)
          };
          %0 = %f(%a, %b);
          %1 = add(%c, %d);
          subtract(%0, %1)
        }""",
    )


def test_call_site_devices_flow_to_function_results() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          let %f = fn (%x: $T, %y: $T) { add(%x, %y) };
          %0 = %f(%a, %b);
          %1 = on_device(%0, virtual_device=$C);
          %2 = add(%c, %d);
          subtract(%1, %2)
        }""",
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T,
                  param_virtual_devices=[$C, $C, $G, $G], virtual_device=$G) {
          let %f = fn (%x: $T, %y: $T, param_virtual_devices=[$C, $C], virtual_device=$C) {
            add(%x, %y)
          };
          %1 = %f(%a, %b);
          %2 = on_device(%1, virtual_device=$C, constrain_result=True);
          %3 = device_copy(%2, src_virtual_device=$C, dst_virtual_device=$G);
          %4 = add(%c, %d);
          subtract(%3, %4)
        }""",
    )


def test_higher_order_constraints_flow_back_through_function_arguments() -> None:
    fn_t = f"fn({T}) -> {T}"
    exercise(
        f"""
        def @main(%x: $T, %y: $T) {{
          let %f = fn (%g: {fn_t}) {{
            fn (%a: $T) {{
              %0 = on_device(%a, virtual_device=$C);
              %1 = %g(%0);
              add(%1, %x)
            }}
          }};
          let %h = fn (%b: $T) {{ negative(%b) }};
          %2 = %f(%h);
          %3 = %2(%y);
          subtract(%x, %3)
        }}""",
        f"""
        def @main(%x: $T, %y: $T, param_virtual_devices=[$G, $C], virtual_device=$G) {{
          let %f = fn (%g: {fn_t}, param_virtual_devices=[$G], virtual_device=$G) {{
            fn (%a: $T, param_virtual_devices=[$C], virtual_device=$G) {{
              %0 = device_copy(%a, src_virtual_device=$C, dst_virtual_device=$G);
              %1 = %g(%0);
              add(%1, %x)
            }}
          }};
          let %h = fn (%b: $T, param_virtual_devices=[$G], virtual_device=$G) {{
            negative(%b)
          }};
          %2 = %f(%h);
          %3 = %2(%y);
          subtract(%x, %3)
        }}""",
        run=False,  # closures returned by calls and ifs over functions: interpreter only
    )


def test_a_function_in_a_tuple_runs_where_the_tuple_lives() -> None:
    exercise(
        """
        def @main(%x: $T, %y: $T) {
          let %f = fn (%a: $T, %b: $T) {
            %0 = on_device(%b, virtual_device=$C);
            add(%a, %0)
          };
          let %t = (%f, %x);
          %1 = %t.1;
          %2 = %t.0;
          %2(%1, %y)
        }""",
        """
        def @main(%x: $T, %y: $T, param_virtual_devices=[$C, $C], virtual_device=$C) {
          let %f = fn (%a: $T, %b: $T, param_virtual_devices=[$C, $C], virtual_device=$C) {
            add(%a, %b)
          };
          let %t = on_device((%f, %x), virtual_device=$C, constrain_result=True);
          %0 = %t.1;
          %1 = %t.0;
          %1(%0, %y)
        }""",
    )


def test_explicit_copy_pins_both_sides() -> None:
    exercise(
        """
        def @main(%x: $T) {
          %0 = device_copy(%x, src_virtual_device=$C, dst_virtual_device=$G);
          add(%0, 1f)
        }""",
        """
        def @main(%x: $T, param_virtual_devices=[$C], virtual_device=$G) {
          %0 = device_copy(%x, src_virtual_device=$C, dst_virtual_device=$G);
          add(%0, 1f)
        }""",
    )


def test_redundant_annotations_share_one_copy() -> None:
    exercise(
        """
        def @main(%x: $T, %y: $T, %z: $T) {
          %0 = add(%x, %y);
          %1 = on_device(%0, virtual_device=$C);
          %2 = subtract(%1, %z);
          %3 = on_device(%0, virtual_device=$C);
          add(%2, %3)
        }""",
        """
        def @main(%x: $T, %y: $T, %z: $T,
                  param_virtual_devices=[$C, $C, $G], virtual_device=$G) {
          %0 = add(%x, %y);
          %1 = on_device(%0, virtual_device=$C, constrain_result=True);
          %2 = device_copy(%1, src_virtual_device=$C, dst_virtual_device=$G);
          %3 = subtract(%2, %z);
          add(%3, %2)
        }""",
    )


def test_annotated_result_pins_the_function_result() -> None:
    exercise(
        """
        def @main(%x: $T, %y: $T, %z: $T) {
          %0 = add(%x, %y);
          %1 = on_device(%0, virtual_device=$G);
          %2 = subtract(%1, %z);
          on_device(%2, virtual_device=$C)
        }""",
        """
        def @main(%x: $T, %y: $T, %z: $T,
                  param_virtual_devices=[$G, $G, $C], virtual_device=$C) {
          %0 = add(%x, %y);
          %1 = on_device(%0, virtual_device=$G, constrain_result=True);
          %2 = device_copy(%1, src_virtual_device=$G, dst_virtual_device=$C);
          subtract(%2, %z)
        }""",
    )


def test_annotations_that_agree_leave_no_copy() -> None:
    exercise(
        """
        def @main(%x: $T, %y: $T, %z: $T) {
          %0 = add(%x, %y);
          %1 = on_device(%0, virtual_device=$C);
          %2 = subtract(%1, %z);
          on_device(%2, virtual_device=$C)
        }""",
        """
        def @main(%x: $T, %y: $T, %z: $T,
                  param_virtual_devices=[$C, $C, $C], virtual_device=$C) {
          %0 = add(%x, %y);
          subtract(%0, %z)
        }""",
    )


def test_conv_network_moves_the_sum_and_back() -> None:
    d, w = "Tensor[(1, 4, 8, 8), float32]", "Tensor[(4, 4, 3, 3), float32]"
    conv = "conv2d({}, %weight, padding=[1, 1, 1, 1])"
    exercise(
        f"""
        def @main(%data1: {d}, %data2: {d}, %weight: {w}) {{
          %0 = {conv.format("%data1")};
          %1 = {conv.format("%data2")};
          %2 = on_device(%0, virtual_device=$C);
          %3 = on_device(%1, virtual_device=$C);
          %4 = add(%2, %3);
          %5 = on_device(%4, virtual_device=$G);
          %6 = {conv.format("%5")};
          on_device(%6, virtual_device=$C)
        }}""",
        f"""
        def @main(%data1: {d}, %data2: {d}, %weight: {w},
                  param_virtual_devices=[$C, $C, $C], virtual_device=$C) {{
          %0 = {conv.format("%data1")};
          %1 = on_device(%0, virtual_device=$C, constrain_result=True);
          %2 = {conv.format("%data2")};
          %3 = on_device(%2, virtual_device=$C, constrain_result=True);
          %4 = device_copy(%1, src_virtual_device=$C, dst_virtual_device=$G);
          %5 = device_copy(%3, src_virtual_device=$C, dst_virtual_device=$G);
          %6 = add(%4, %5);
          %7 = on_device(%6, virtual_device=$G, constrain_result=True);
          %8 = device_copy(%7, src_virtual_device=$G, dst_virtual_device=$C);
          {conv.format("%8")}
        }}""",
    )


def test_copies_go_after_a_tuple_projection() -> None:
    t = "Tensor[(3, 3, 4), float32]"
    exercise(
        f"""
        def @main(%x: {t}) {{
          let %t = split(%x, indices_or_sections=3);
          %0 = on_device(%t, virtual_device=$C);
          %1 = on_device(%t, virtual_device=$C);
          %2 = %0.0;
          %3 = %1.1;
          %4 = subtract(%2, %3);
          on_device(%4, virtual_device=$G)
        }}""",
        f"""
        def @main(%x: {t}, param_virtual_devices=[$C], virtual_device=$G) {{
          %0 = split(%x, indices_or_sections=3);
          let %t = on_device(%0, virtual_device=$C, constrain_result=True);
          %1 = %t.0;
          %2 = on_device(%1, virtual_device=$C, constrain_result=True);
          %3 = %t.1;
          %4 = on_device(%3, virtual_device=$C, constrain_result=True);
          %5 = device_copy(%2, src_virtual_device=$C, dst_virtual_device=$G);
          %6 = device_copy(%4, src_virtual_device=$C, dst_virtual_device=$G);
          subtract(%5, %6)
        }}""",
    )


def test_propagation_through_a_diamond() -> None:
    # TVM copies %0 twice (once per annotation); here once
    exercise(
        """
        def @main(%x: $T) {
          %0 = negative(%x);
          %1 = on_device(%0, virtual_device=$C);
          %2 = negative(%1);
          %3 = on_device(%0, virtual_device=$C);
          %4 = negative(%3);
          %5 = on_device(%2, virtual_device=$G);
          %6 = on_device(%4, virtual_device=$G);
          %7 = add(%5, %6);
          %8 = on_device(%7, virtual_device=$G);
          %9 = negative(%8);
          on_device(%9, virtual_device=$C)
        }""",
        """
        def @main(%x: $T, param_virtual_devices=[$C], virtual_device=$C) {
          %0 = negative(%x);
          %1 = on_device(%0, virtual_device=$C, constrain_result=True);
          %2 = device_copy(%1, src_virtual_device=$C, dst_virtual_device=$G);
          %3 = negative(%2);
          %4 = negative(%2);
          %5 = add(%3, %4);
          %6 = on_device(%5, virtual_device=$G, constrain_result=True);
          %7 = device_copy(%6, src_virtual_device=$G, dst_virtual_device=$C);
          negative(%7)
        }""",
    )


def test_unpropagatable_graph() -> None:
    exercise(
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T) {
          %0 = add(%a, %b);
          %1 = multiply(%c, %d);
          %2 = on_device(%0, virtual_device=$C);
          %3 = on_device(%1, virtual_device=$G);
          %4 = subtract(%2, %3);
          on_device(%4, virtual_device=$C)
        }""",
        """
        def @main(%a: $T, %b: $T, %c: $T, %d: $T,
                  param_virtual_devices=[$C, $C, $G, $G], virtual_device=$C) {
          %0 = multiply(%c, %d);
          %1 = on_device(%0, virtual_device=$G, constrain_result=True);
          %2 = add(%a, %b);
          %3 = device_copy(%1, src_virtual_device=$G, dst_virtual_device=$C);
          subtract(%2, %3)
        }""",
    )


def test_if_over_functions() -> None:
    exercise(
        """
        def @main(%x: bool, %y: $T, %z: $T) {
          let %f = fn (%a: $T) {
            %0 = on_device(%y, virtual_device=$C, constrain_result=True);
            add(%a, %0)
          };
          let %g = fn (%a1: $T) { subtract(%a1, %y) };
          let %h = if (%x) { %f } else { %g };
          %h(%z)
        }""",
        """
        def @main(%x: bool, %y: $T, %z: $T,
                  param_virtual_devices=[$C, $C, $C], virtual_device=$C) {
          let %f = fn (%a: $T, param_virtual_devices=[$C], virtual_device=$C) { add(%a, %y) };
          let %g = fn (%a1: $T, param_virtual_devices=[$C], virtual_device=$C) {
            subtract(%a1, %y)
          };
          let %h = on_device(if (%x) { %f } else { %g }, virtual_device=$C, constrain_result=True);
          %h(%z)
        }""",
        run=False,  # closures returned by calls and ifs over functions: interpreter only
    )


def test_global_functions_share_one_domain_with_their_callers() -> None:
    exercise(
        """
        def @f(%a: $T, %b: $T) -> $T {
          %0 = on_device(%b, virtual_device=$C);
          add(%a, %0)
        }
        def @main(%x: $T, %y: $T) -> $T {
          @f(%y, %x)
        }""",
        """
        def @f(%a: $T, %b: $T, param_virtual_devices=[$G, $C], virtual_device=$G) -> $T {
          %0 = device_copy(%b, src_virtual_device=$C, dst_virtual_device=$G);
          add(%a, %0)
        }
        def @main(%x: $T, %y: $T, param_virtual_devices=[$C, $G], virtual_device=$G) -> $T {
          @f(%y, %x)
        }""",
    )


def test_free_on_device_allows_a_copy_only_where_memory_scopes_differ() -> None:
    exercise(
        """
        def @on_scope_b(%x: $T, param_virtual_devices=[$B], virtual_device=$B) -> $T {
          %x
        }
        def @main(%a: $T, %b: $T, %c: $T, param_virtual_devices=[$B, $A, $B],
                  virtual_device=$A) {
          %0 = @on_scope_b(on_device(%a, virtual_device=$A, constrain_body=False));
          %1 = @on_scope_b(on_device(%b, virtual_device=$A, constrain_body=False));
          %2 = @on_scope_b(on_device(%c, virtual_device=$A, constrain_body=False));
          %3 = add(add(%0, %1), %2);
          on_device(%3, virtual_device=$A, constrain_body=False)
        }""",
        """
        def @on_scope_b(%x: $T, param_virtual_devices=[$B], virtual_device=$B) -> $T {
          %x
        }
        def @main(%a: $T, %b: $T, %c: $T, param_virtual_devices=[$B, $A, $B],
                  virtual_device=$A) {
          %0 = @on_scope_b(%a);
          %1 = device_copy(%b, src_virtual_device=$A, dst_virtual_device=$B);
          %2 = @on_scope_b(%1);
          %3 = @on_scope_b(%c);
          %4 = add(add(%0, %2), %3);
          %5 = on_device(%4, virtual_device=$B, constrain_result=True);
          device_copy(%5, src_virtual_device=$B, dst_virtual_device=$A)
        }""",
    )


def test_memory_scopes_are_different_devices() -> None:
    exercise(
        """
        def @main(%x: $T, param_virtual_devices=[$A], virtual_device=$B) {
          exp(%x)
        }""",
        """
        def @main(%x: $T, param_virtual_devices=[$A], virtual_device=$B) {
          %0 = device_copy(%x, src_virtual_device=$A, dst_virtual_device=$B);
          exp(%0)
        }""",
    )


def test_primitive_functions_are_not_looked_into() -> None:
    # the pin on cpu:1 inside the fused function would put %a there if it were examined;
    # unexamined, the call is device-polymorphic and %a follows the cpu:0 annotation
    inner = "negative(on_device(%p, virtual_device=$G, constrain_result=True))"
    exercise(
        f"""
        def @main(%a: $T) {{
          %0 = fn (%p: $T, Primitive=1) {{ {inner} }};
          %1 = %0(%a);
          %2 = on_device(%1, virtual_device=$C);
          exp(%2)
        }}""",
        f"""
        def @main(%a: $T, param_virtual_devices=[$C], virtual_device=$G) {{
          %0 = fn (%p: $T, Primitive=1) {{ {inner} }};
          %1 = %0(%a);
          %2 = on_device(%1, virtual_device=$C, constrain_result=True);
          %3 = device_copy(%2, src_virtual_device=$C, dst_virtual_device=$G);
          exp(%3)
        }}""",
        run=False,  # a fused function holding an annotation is not something codegen makes
    )


def test_the_outer_of_two_nested_annotations_counts() -> None:
    exercise(
        """
        def @main(%x: $T) {
          %0 = exp(%x);
          %1 = on_device(on_device(%0, virtual_device=$G), virtual_device=$C);
          negative(%1)
        }""",
        """
        def @main(%x: $T, param_virtual_devices=[$C], virtual_device=$G) {
          %0 = exp(%x);
          %1 = on_device(%0, virtual_device=$C, constrain_result=True);
          %2 = device_copy(%1, src_virtual_device=$C, dst_virtual_device=$G);
          negative(%2)
        }""",
    )


def test_conflicting_uses_are_an_error_naming_both_devices() -> None:
    mod = parse(
        """
        def @main(%a: $T) {
          %0 = on_device(%a, virtual_device=$C, constrain_result=True);
          %1 = on_device(%a, virtual_device=$G, constrain_result=True);
          add(%0, %1)
        }"""
    )
    with pytest.raises(PassError, match=r"%a.*cpu:0.*cpu:1|%a.*cpu:1.*cpu:0"):
        plan(mod)


def test_unknown_default_device_text_is_a_clear_error() -> None:
    with pytest.raises(ir.CompilerError, match="type\\[:id\\]"):
        pm.passes.PlanDevices(default="not a device")(parse("def @main(%x: $T) { exp(%x) }"))


def test_config_default_applies() -> None:
    mod = parse("def @main(%x: $T) { exp(%x) }")
    with pm.PassContext(config={"devices.default": "cpu:3"}):
        planned = pm.passes.PlanDevices()(mod)
    assert planned["main"].attrs["virtual_device"] == ir.VirtualDevice("cpu", 3)


def test_every_sub_expression_has_a_device() -> None:
    planned = plan(parse(LEFT_ADD_ON_CPU))
    devices = pm.passes.device_map(planned, G)
    by_text = {}
    for e, vd in devices.items():
        if isinstance(e, Call):
            by_text.setdefault(e.op.name, set()).add(vd)  # type: ignore[union-attr]
    assert by_text["add"] == {C, G}
    assert by_text["device_copy"] == {G}
    assert by_text["subtract"] == {G}
    main = planned["main"]
    assert devices[main] == G and [devices[p] for p in main.params] == [C, C, G, G]


def test_copies_minimise_bytes_moved() -> None:
    # x on cpu:0, result on cpu:1: move the 4 KB row sums, not the 4 MB input (TVM has no
    # such freedom: its operator arguments must share the operator's device)
    x = ir.var("x", shape=(1024, 1024))
    body = op.multiply(op.sum(op.exp(x), axis=1), ir.const(2.0))
    fn = Function([x], body, attrs={"virtual_device": G, "param_virtual_devices": [C]})
    planned = plan(ir.infer_type(ir.IRModule.from_expr(fn)), C)
    copies = [
        e for e in ir.post_order(planned["main"]) if getattr(e, "op", None) is op.get("device_copy")
    ]
    assert len(copies) == 1 and copies[0].checked_type.nbytes == 4096


def test_deep_chain_plans_without_recursion() -> None:
    """3,000 ops under a recursion limit of 1,000 (the cut's integer program takes
    seconds at 10,000: its time grows faster than the chain)."""
    x = ir.var("x", shape=(4,))
    e: ir.Expr = op.on_device(x, C)
    for _ in range(3_000):
        e = op.negative(e)
    fn = Function([x], op.on_device(e, G, constrain_result=True))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the interpreter's default
    try:
        planned = plan(ir.infer_type(ir.IRModule.from_expr(fn)), C)
    finally:
        sys.setrecursionlimit(limit)
    assert planned["main"].attrs["virtual_device"] == G
    assert (
        sum(
            1
            for e in ir.post_order(planned["main"])
            if getattr(e, "op", None) is op.get("device_copy")
        )
        == 1
    )


@st.composite
def pinned_programs(draw):
    """A random program with random device annotations of every form and random
    parameter and result devices."""
    case = draw(programs(max_nodes=10))
    fn = case.mod["main"]
    devices = [ir.VirtualDevice("cpu", k) for k in range(3)]
    memo: dict[ir.Expr, ir.Expr] = {}
    for e in ir.post_order(fn.body, into_functions=False):
        new = e if isinstance(e, ir.Var | ir.Constant) else _rebuild(e, memo)
        if isinstance(e, Call) and draw(st.integers(0, 3)) == 0:
            form = draw(
                st.sampled_from([(False, True), (True, True), (False, False), (True, False)])
            )
            new = op.on_device(new, draw(st.sampled_from(devices)), *form)
        memo[e] = new
    attrs = {}
    if draw(st.booleans()):
        attrs["virtual_device"] = draw(st.sampled_from(devices))
    if draw(st.booleans()):
        attrs["param_virtual_devices"] = [draw(st.sampled_from(devices)) for _ in fn.params]
    main = Function(fn.params, memo[fn.body], None, attrs)
    return ir.infer_type(ir.IRModule.from_expr(main)), case.inputs


def _rebuild(e: ir.Expr, memo: dict[ir.Expr, ir.Expr]) -> ir.Expr:
    from egraph_ir.visitor import rebuild

    return rebuild(e, memo)


@settings(deadline=None)
@given(pinned_programs())
def test_random_programs_with_random_pins_plan_run_and_match(case) -> None:
    mod, inputs = case
    try:
        planned = plan(mod, C)
    except PassError as exc:  # pins that contradict each other (x pinned to two devices)
        assert "conflicting devices" in str(exc)
        event("contradictory pins")
        return
    assert_structural_equal(plan(planned, C), planned)
    expected = ir.interpret(mod, **inputs)
    assert_allclose(ir.interpret(planned, **inputs), expected)
    with pm.PassContext(config={"codegen.check_devices": True}):
        exe = codegen.build(planned)
    assert_allclose(exe(**inputs), expected)


@settings(max_examples=200)
@given(case=programs(max_nodes=8, max_inputs=2), data=st.data())
def test_copies_move_the_fewest_bytes_on_random_dags(case, data) -> None:
    """Inputs and the result on random devices of two: the bytes PlanDevices copies equal
    the brute-force minimum over every placement of every value (reductions and broadcasts
    included: a copy may go before, inside or after the body, whichever moves least)."""
    from hypothesis import assume

    fn = case.mod["main"]
    nodes = value_nodes(fn)
    assume(3 <= len(nodes) <= 10)
    pins = {p: data.draw(st.sampled_from([CPU0, CPU1])) for p in fn.params}
    out_device = data.draw(st.sampled_from([CPU0, CPU1]))
    attrs = fn.attrs.with_(
        virtual_device=out_device, param_virtual_devices=tuple(pins[p] for p in fn.params)
    )
    mod = ir.infer_type(ir.IRModule.from_expr(Function(fn.params, fn.body, fn.ret_type, attrs)))
    planned = pm.passes.PlanDevices(default=CPU0)(mod)
    event(f"values: {len(nodes)}")
    assert copied_bytes(planned) == brute_force_cost(mod["main"], pins, out_device)


def test_a_fused_function_runs_on_the_device_it_declares() -> None:
    """A primitive function with virtual_device=cpu:1 called from a cpu:0 program: its
    operand is copied in and its result back (the declaration was ignored)."""
    p = ir.var("p", shape=(4,))
    prim = ir.Function([p], op.exp(p)).with_attr("Primitive", 1).with_attr("virtual_device", G)
    x = ir.var("x", shape=(4,))
    call = Call(prim, (op.abs(x),))
    fn = Function([x], op.negative(call))
    fn = fn.with_attr("virtual_device", C).with_attr("param_virtual_devices", [C])
    mod = ir.infer_type(ir.IRModule.from_expr(fn))
    planned = plan(mod, C)
    copies = [
        (e.attrs["src_virtual_device"], e.attrs["dst_virtual_device"])
        for e in ir.post_order(planned["main"].body)
        if isinstance(e, Call) and getattr(e.op, "name", "") == "device_copy"
    ]
    assert sorted(copies, key=str) == sorted([(C, G), (G, C)], key=str)
    inputs = random_inputs(mod)
    assert_allclose(ir.interpret(planned, **inputs), ir.interpret(mod, **inputs))


def test_copies_take_the_cheapest_route_one_copy_per_hop() -> None:
    """cpu:0 -> cpu:2 direct costs 1.0 per byte, through cpu:1 0.1 + 0.1: the input goes
    through cpu:1 (two copies), runs on three arenas, and planning again changes nothing."""
    cpu2 = ir.VirtualDevice("cpu", 2)
    x = ir.var("x", shape=(256,))
    fn = Function([x], op.exp(x)).with_attr("virtual_device", cpu2)
    mod = ir.infer_type(ir.IRModule.from_expr(fn.with_attr("param_virtual_devices", [C])))
    links = {("cpu:0", "cpu:2"): 1.0, ("cpu:0", "cpu:1"): 0.1, ("cpu:1", "cpu:2"): 0.1}
    planned = pm.passes.PlanDevices(default=C, links=links)(mod)
    hops = [
        (str(e.attrs["src_virtual_device"]), str(e.attrs["dst_virtual_device"]))
        for e in ir.post_order(planned["main"].body)
        if isinstance(e, Call) and getattr(e.op, "name", "") == "device_copy"
    ]
    assert hops == [("cpu:0", "cpu:1"), ("cpu:1", "cpu:2")]
    assert_structural_equal(pm.passes.PlanDevices(default=C, links=links)(planned), planned)
    config = {"devices.link_costs": {"cpu:0->cpu:2": 1.0, "cpu:0->cpu:1": 0.1, "cpu:1->cpu:2": 0.1}}
    with pm.PassContext(config=config):
        assert_structural_equal(pm.passes.PlanDevices(default=C)(mod), planned)
    run_on_two_devices(mod, planned)  # three, here
    with pytest.raises(ir.CompilerError, match="link costs"):
        pm.passes.PlanDevices(default=C, links={("cpu:0", "cpu:1"): -1.0})(mod)


@settings(max_examples=200)
@given(case=programs(max_nodes=8, max_inputs=2), data=st.data())
def test_routed_copies_cost_the_brute_force_minimum_on_random_dags(case, data) -> None:
    """Three devices with random link costs per pair: PlanDevices' copies (one per hop)
    cost what the cheapest placement of every value costs, by brute force."""
    from hypothesis import assume

    from passmgr.passes.devices.links import Links

    devices = [C, G, ir.VirtualDevice("cpu", 2)]
    fn = case.mod["main"]
    nodes = value_nodes(fn)
    assume(3 <= len(nodes) <= 7)
    pins = {p: data.draw(st.sampled_from(devices)) for p in fn.params}
    out_device = data.draw(st.sampled_from(devices))
    assume(len({*pins.values(), out_device}) <= 2 or len(nodes) <= 5)  # brute force size
    cost = st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0])
    links = Links({(a, b): data.draw(cost) for a in devices for b in devices if a != b})
    attrs = fn.attrs.with_(
        virtual_device=out_device, param_virtual_devices=tuple(pins[p] for p in fn.params)
    )
    mod = ir.infer_type(ir.IRModule.from_expr(Function(fn.params, fn.body, fn.ret_type, attrs)))
    planned = pm.passes.PlanDevices(default=C, links=links)(mod)
    best = brute_force_cost(mod["main"], pins, out_device, links)
    assert copied_cost(planned, links) == pytest.approx(best)


def test_an_annotated_parameter_moves_the_row_sums_not_itself() -> None:
    """reliability-4 copy_follows_annotation: `on_device(%x, cpu0)` (result free) on a
    parameter, the rest pinned to cpu1 by its outer annotation: the copy goes after the
    reduction (4 KiB), as with param_virtual_devices, not before it (x's 4 MiB)."""
    cpu0, cpu1 = ir.VirtualDevice("cpu", 0), ir.VirtualDevice("cpu", 1)
    x = ir.var("x", shape=(1024, 1024), dtype="float32")
    total = op.sum(op.exp(op.on_device(x, cpu0)), axis=[1])
    body = op.on_device(op.multiply(total, ir.const(np.float32(2))), cpu1)
    mod = ir.IRModule.from_expr(ir.Function([x], body))
    planned = pm.passes.PlanDevices(default=cpu0)(pm.passes.InferType()(mod))
    nodes = ir.post_order(planned["main"].body)
    copies = [e for e in nodes if getattr(e, "op", None) is op.get("device_copy")]
    assert len(copies) == 1 and copies[0].args[0].checked_type.shape == (1024,)
    exe = codegen.build(planned)
    ones = np.ones((1024, 1024), np.float32)
    np.testing.assert_allclose(exe(ones), np.full(1024, 2 * 1024 * np.e, np.float32), rtol=1e-5)
    assert exe.stats["copy_bytes_per_run"] == 4096
