"""Tokens of the text format and its metadata section (the constants, base64-encoded)."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ParseError
from ..types import DTYPES

MAX_NESTING = 150  # keeps recursive descent far from Python's recursion limit
MAX_TENSOR_RANK = 32  # numpy arrays have at most 64 dimensions
SUFFIX_DTYPE = {
    "f": "float32",
    "f32": "float32",
    "f64": "float64",
    "f16": "float16",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
}

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+) | (?P<nl>\n) | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<number>[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|inf|nan)
        (?:f16|f32|f64|f|i8|i16|i32|i64|u8|u16|u32|u64)?(?![A-Za-z0-9_]))
  | (?P<local>%[A-Za-z0-9_]+) | (?P<global>@[A-Za-z0-9_]+)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<arrow>->) | (?P<punct>[(){}\[\],;=:.?*+-])
  | (?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    line: int
    col: int


def tokenize(text: str, first_line: int = 1) -> list[Token]:
    """Split text into tokens with 1-based positions; unknown characters are errors."""
    toks: list[Token] = []
    line, line_start = first_line, 0
    for m in _TOKEN.finditer(text):
        kind, value = m.lastgroup, m.group()
        col = m.start() - line_start + 1
        if kind == "bad":
            raise ParseError(f"{line}:{col}: unexpected character {value!r}")
        if kind in ("nl", "comment"):
            newlines = value.count("\n")
            if newlines:
                line += newlines
                line_start = m.start() + value.rindex("\n") + 1
            continue
        if kind != "ws":
            toks.append(Token(kind, value, line, col))  # type: ignore[arg-type]
    toks.append(Token("eof", "", line, m.end() - line_start + 1 if toks else 1))
    return toks


def read_metadata(text: str, first_line: int) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    row = re.compile(r"meta\[Constant\]\[(\d+)\] = (\w+) \(([\d, ]*)\) ([A-Za-z0-9+/=]*)$")
    for offset, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        m = row.match(line.strip())
        where = f"{first_line + offset}:1"
        if not m or int(m.group(1)) != len(out) or m.group(2) not in DTYPES:
            raise ParseError(f"{where}: malformed metadata line")
        shape = tuple(int(d) for d in m.group(3).replace(" ", "").split(",") if d)
        try:
            raw = base64.b64decode(m.group(4), validate=True)
        except binascii.Error as exc:
            raise ParseError(f"{where}: metadata is not valid base64 ({exc})") from None
        dtype = np.dtype(m.group(2)).newbyteorder("<")
        if len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ParseError(f"{where}: metadata size does not match shape {shape}")
        out.append(np.frombuffer(raw, dtype=dtype).astype(m.group(2)).reshape(shape))
    return out
