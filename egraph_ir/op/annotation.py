"""Annotation ops: markers on dataflow edges that compute nothing.

`compiler_begin(x, compiler=T)` marks where a value enters a region offloaded to target T,
`compiler_end(x, compiler=T)` where it leaves one (TVM's BYOC annotations; AnnotateTarget
writes them, MergeCompilerRegions and PartitionGraph read them). The interpreter passes the
value through, tuples included.
"""

from __future__ import annotations

from ..attrs import Attrs
from ..registry import AttrSpec, Op, OpPattern, register_op
from ..types import TensorType, Type
from ._common import per_output_element


def _same(args: list[TensorType], attrs: Attrs) -> Type:
    return args[0]


for _name, _doc in (
    ("compiler_begin", "the value enters a region compiled by `compiler`"),
    ("compiler_end", "the value leaves a region compiled by `compiler`"),
):
    register_op(
        Op(
            name=_name,
            inputs=("data",),
            infer=_same,
            reference=lambda x, compiler: x,
            pattern=OpPattern.OPAQUE,
            flops=per_output_element(0.0),
            attrs=(AttrSpec("compiler", "str"),),
            doc=_doc,
            annotation=True,
        )
    )

ANNOTATIONS = ("compiler_begin", "compiler_end")
