"""Cycles in e-graphs: the strong components of a class graph (where order variables are
needed) and the cycles a choice of nodes closes (what the lazy cuts forbid)."""

from __future__ import annotations

from ..errors import CompilerError
from .graph import ENode, Value


def reachable(choice: dict[Value, ENode], root: Value) -> list[Value]:
    """Classes used by the chosen program, children before parents; raises on a cycle."""
    order: list[Value] = []
    state: dict[Value, int] = {}  # 1: on the path, 2: done
    stack: list[tuple[Value, bool]] = [(root, False)]
    while stack:
        c, expanded = stack.pop()
        if expanded:
            state[c] = 2
            order.append(c)
            continue
        if state.get(c) == 2:
            continue
        if state.get(c) == 1:
            raise CompilerError("extraction chose a cyclic program")
        state[c] = 1
        stack.append((c, True))
        for k in reversed(choice[c].children):
            if state.get(k) == 1:
                raise CompilerError("extraction chose a cyclic program")
            if state.get(k) != 2:
                stack.append((k, False))
    return order


def strong_components(adjacent: dict[Value, set[Value]]) -> list[list[Value]]:
    """The strongly connected components of a graph (Tarjan's algorithm, iterative)."""
    index: dict[Value, int] = {}
    low: dict[Value, int] = {}
    stack: list[Value] = []
    on_stack: set[Value] = set()
    components: list[list[Value]] = []
    for start in adjacent:
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(adjacent[start]))]
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(adjacent.get(w, ()))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    components.append(component)
    return components


def cycles_of(
    choice: dict[Value, ENode], root: Value, everywhere: bool = False
) -> list[list[ENode]]:
    """The cycles the chosen nodes close on the way from root (one per back edge), or
    `everywhere` among them (chosen classes no path from root reaches hold one when every
    chosen class has a chosen parent)."""
    cycles: list[list[ENode]] = []
    state: dict[Value, int] = {}  # 1: on the path, 2: done
    path: list[Value] = []
    starts = [root, *(c for c in choice if c != root)] if everywhere else [root]
    stack: list[tuple[Value, int]] = []
    for start in starts:
        if start not in state:
            stack.append((start, 0))
            _walk(choice, stack, state, path, cycles)
    return cycles


def _walk(
    choice: dict[Value, ENode],
    stack: list[tuple[Value, int]],
    state: dict[Value, int],
    path: list[Value],
    cycles: list[list[ENode]],
) -> None:
    """Depth-first from the class on the stack, recording a cycle per back edge."""
    while stack:
        c, i = stack.pop()
        if i == 0:
            state[c] = 1
            path.append(c)
        kids = choice[c].children
        if i < len(kids):
            stack.append((c, i + 1))
            k = kids[i]
            if state.get(k) == 1:
                cycles.append([choice[v] for v in path[path.index(k) :]])
            elif k not in state:
                stack.append((k, 0))
            continue
        state[c] = 2
        path.pop()
