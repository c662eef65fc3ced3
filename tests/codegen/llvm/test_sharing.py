"""What the emitter shares (codegen/llvm/sharing.py): equal index arithmetic one key, reads
of memory and -0.0 apart; locals set once and read where their definition reaches."""

from __future__ import annotations

from codegen.llvm.sharing import StructuralKeys, single_assignment
from codegen.loop_ir import INDEX, Assign, Const, Declare, For, Load, LoopVar, Ref, Store, idx


def test_equal_index_arithmetic_shares_a_key_and_reads_do_not() -> None:
    keys = StructuralKeys()
    i = LoopVar(INDEX, "i")
    assert keys.key(i * 16 + idx(3)) == keys.key(LoopVar(INDEX, "i") * 16 + idx(3))
    assert keys.key(i * 16 + idx(3)) != keys.key(i * 16 + idx(4))
    one, other = Load("float32", "x", i), Load("float32", "x", i)  # a store may come between
    assert keys.key(one) != keys.key(other)
    assert keys.key(Const("float32", -0.0)) != keys.key(Const("float32", 0.0))


def test_locals_set_once_and_read_in_reach_are_plain_values() -> None:
    x = Load("float32", "x", LoopVar(INDEX, "i"))
    body = [
        For("i", 4, [
            Declare("t", x),  # read below it, in its list and a nested loop: a value
            For("j", 2, [Store("out", LoopVar(INDEX, "j"), Ref("float32", "t"))]),
            Declare("acc", Const("float32", 0.0)),  # assigned: a stack slot
            Assign("acc", Ref("float32", "acc")),
            Declare("late", x),
        ]),
        Store("out", idx(0), Ref("float32", "late")),  # after its loop: not reached
    ]  # fmt: skip
    assert single_assignment(body) == {"t"}
