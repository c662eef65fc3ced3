"""Device domains and their unification (the constraint store of PlanDevices).

A domain is either first-order (a leaf: one device, maybe not known yet) or higher-order
(`fn(D1, ..., Dn): Dr`, the devices of a function's parameters and result). Domains are
integers in a union-find; unifying two leaves merges them (an error when both are bound
to different devices), two function domains unify parameter by parameter and result with
result, and a function domain meeting a leaf is "collapsed": every leaf inside it takes
the leaf's device (a function stored in a tuple runs where the tuple lives). Everything is
a worklist: nothing recurses over the program or over nested function types.
"""

from __future__ import annotations

from egraph_ir.device import VirtualDevice
from egraph_ir.errors import PassError
from egraph_ir.types import FuncType, Type


class Domains:
    def __init__(self) -> None:
        self.parent: list[int] = []
        self.device: list[VirtualDevice | None] = []
        self.fn_parts: dict[int, tuple[list[int], int]] = {}  # fn domain -> (params, result)

    # ------------------------------------------------------------ making
    def leaf(self, device: VirtualDevice | None = None) -> int:
        self.parent.append(len(self.parent))
        self.device.append(device)
        return len(self.parent) - 1

    def function(self, params: list[int], result: int) -> int:
        d = self.leaf()
        self.fn_parts[d] = (list(params), result)
        return d

    def for_type(self, ty: Type | None) -> int:
        """A fresh domain shaped like the type: function types get function domains."""
        if not isinstance(ty, FuncType):
            return self.leaf()
        pending: list[tuple[FuncType, int]] = []
        root = self.function([], -1)
        pending.append((ty, root))
        while pending:
            t, d = pending.pop()
            params = []
            for p in (*t.params, t.ret):
                sub = self.leaf() if not isinstance(p, FuncType) else self.function([], -1)
                if isinstance(p, FuncType):
                    pending.append((p, sub))
                params.append(sub)
            self.fn_parts[d] = (params[:-1], params[-1])
        return root

    # ------------------------------------------------------------ reading
    def find(self, d: int) -> int:
        root = d
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[d] != root:  # path compression
            self.parent[d], d = root, self.parent[d]
        return root

    def is_function(self, d: int) -> bool:
        return self.find(d) in self.fn_parts

    def result_leaf(self, d: int) -> int:
        """The first-order domain where a function's closure (its result) lives."""
        d = self.find(d)
        while d in self.fn_parts:
            d = self.find(self.fn_parts[d][1])
        return d

    def device_of(self, d: int) -> VirtualDevice | None:
        return self.device[self.result_leaf(d)]

    # ------------------------------------------------------------ constraining
    def pin(self, d: int, device: VirtualDevice, where: str) -> None:
        self.unify(d, self.leaf(device), where)

    def unify(self, a: int, b: int, where: str) -> None:
        work = [(a, b)]
        while work:
            x, y = work.pop()
            rx, ry = self.find(x), self.find(y)
            if rx == ry:
                continue
            fx, fy = self.fn_parts.get(rx), self.fn_parts.get(ry)
            if fx is None and fy is None:
                dx, dy = self.device[rx], self.device[ry]
                if dx is not None and dy is not None and dx != dy:
                    raise PassError(
                        f"PlanDevices: conflicting devices for {where}: it must be on "
                        f"{dx} and on {dy}"
                    )
                self.parent[ry] = rx
                self.device[rx] = dx or dy
            elif fx is not None and fy is not None:
                if len(fx[0]) != len(fy[0]):
                    raise PassError(
                        f"PlanDevices: {where} is called with {len(fy[0])} argument(s) but "
                        f"takes {len(fx[0])}"
                    )
                self.parent[ry] = rx
                work.extend(zip(fx[0], fy[0], strict=True))
                work.append((fx[1], fy[1]))
            else:  # collapse: every leaf of the function domain joins the first-order one
                leaf, fn = (rx, fy) if fx is None else (ry, fx)
                assert fn is not None
                work.extend((leaf, p) for p in fn[0])
                work.append((leaf, fn[1]))

    def leaves(self, d: int) -> list[int]:
        """The first-order domains inside d (d itself when it is a leaf)."""
        out, stack, seen = [], [d], set()
        while stack:
            r = self.find(stack.pop())
            if r in seen:
                continue
            seen.add(r)
            if r in self.fn_parts:
                params, result = self.fn_parts[r]
                stack.extend([*params, result])
            else:
                out.append(r)
        return out
