"""Immutable attribute maps for calls and functions.

Values are ints, floats, bools, strings, None, or (nested) tuples of those; lists are frozen
into tuples so attrs can be hashed and compared by value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

AttrValue = Any  # int | float | bool | str | None | tuple[AttrValue, ...]


NAN = float("nan")  # every NaN attribute is this object, so equal attrs compare equal


def freeze(value: Any) -> AttrValue:
    """Turn lists and numpy scalars into hashable attribute values (NaN made canonical:
    `nan == nan` is false, but tuples compare items by identity first)."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return freeze(value.item())
    if hasattr(value, "tolist"):
        return freeze(value.tolist())
    if isinstance(value, float) and value != value:
        return NAN
    return value


class Attrs(Mapping[str, AttrValue]):
    """A frozen, hashable mapping with value equality (a tuple of sorted items inside)."""

    __slots__ = ("_items", "_map")
    EMPTY: Attrs

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged = dict(items or {}, **kwargs)
        self._items = tuple(sorted((k, freeze(v)) for k, v in merged.items()))
        self._map = dict(self._items)

    def __getitem__(self, key: str) -> AttrValue:
        return self._map[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._map == dict(other)
        return NotImplemented

    def with_(self, **changes: Any) -> Attrs:
        """Return a copy with some entries replaced or added."""
        return Attrs(self._map, **changes)

    def __repr__(self) -> str:
        return f"Attrs({self._map!r})"


Attrs.EMPTY = Attrs()
