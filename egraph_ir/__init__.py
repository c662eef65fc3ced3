"""egraph_ir: the IR of the compiler (layer 0; imports no other layer).

Types, expressions, modules, the op registry, type inference, the text format, the numpy
reference interpreter and stack-safe visitors.
"""

from __future__ import annotations

from . import frontend, op
from .attrs import Attrs
from .device import VirtualDevice
from .dims import Dim, size_var
from .errors import (
    AttrError,
    CodegenError,
    CompilerError,
    ConfigError,
    FrontendError,
    ParseError,
    PassError,
    RuleError,
    Span,
    TypeInferenceError,
    UnboundVariableError,
    UnknownOpError,
)
from .expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    const,
    var,
)
from .infer import infer_type
from .interp import interpret
from .module import IRModule
from .registry import Cost, Op, OpPattern
from .specialize import specialize
from .structural import structural_equal, structural_hash
from .text.parser import parse
from .text.printer import print_expr  # also makes str(expr) print the text format
from .types import FuncType, TensorType, TupleType, Type
from .visitor import ExprFunctor, ExprMutator, ExprVisitor, post_order

__all__ = [
    "print_expr",
    "AttrError",
    "Attrs",
    "Call",
    "CodegenError",
    "CompilerError",
    "ConfigError",
    "Constant",
    "Cost",
    "Dim",
    "Expr",
    "ExprFunctor",
    "ExprMutator",
    "ExprVisitor",
    "FrontendError",
    "FuncType",
    "Function",
    "GlobalVar",
    "IRModule",
    "If",
    "Let",
    "Op",
    "OpPattern",
    "ParseError",
    "PassError",
    "RuleError",
    "Span",
    "TensorType",
    "Tuple",
    "TupleGetItem",
    "TupleType",
    "Type",
    "TypeInferenceError",
    "UnboundVariableError",
    "UnknownOpError",
    "Var",
    "VirtualDevice",
    "const",
    "infer_type",
    "interpret",
    "size_var",
    "specialize",
    "frontend",
    "op",
    "parse",
    "post_order",
    "structural_equal",
    "structural_hash",
    "var",
]


def __getattr__(name: str):  # lazy submodules with heavier imports
    import importlib

    if name in ("frontend", "models", "testing"):
        if name == "testing":
            from .errors import require

            require("hypothesis", "egraph_ir.testing")
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'egraph_ir' has no attribute '{name}'")
