"""A list field given more than once in a message, read as Go's encoding/json reads it.

Go decodes a repeated key into the field as it stands (decode.go). A slice is reused
(``(*decodeState).array``): element i of the later array is decoded into element i, the length
becomes the later array's, and the elements past it stay in the backing array (``SetLen``; and
``reflect.Value.Grow`` keeps ``old[len:cap]``), where a longer array after decodes into them
again. ``null`` sets the slice to nil and ``[]`` makes a new empty one: nothing stays. Into an
element, a string takes a new string and keeps its value on ``null``; a struct (``v1.Node``)
is decoded into, so two objects' fields merge, and ``null`` leaves it; a pointer (``*MetaPod``)
is set to nil by ``null``, and otherwise what it points to is decoded into.

A merged Node has no bytes of its own in the reply; extproxy keeps, to forward, the one JSON
object whose Go reading is that merge: the earlier object's pairs, then the later one's. Go
decodes an object's pairs one by one into the same struct, so decoding the two objects in turn
and decoding their pairs in one object give the same value, whatever Node's fields are.

May import: the standard library, msgspec and ``protocol.gojson``. No Django, no I/O.
"""
from __future__ import annotations

from typing import Callable, Generic, TypeVar

from .gojson import _Buf, _string_items, _string_list, _trim

T = TypeVar("T")
R = TypeVar("R")


class GoSlice(Generic[T]):
    """A slice field decoded into once or more: its elements, those past its length kept."""

    __slots__ = ("backing", "length", "nil")

    def __init__(self) -> None:
        self.backing: list[T] = []
        self.length = 0
        self.nil = True

    def reset(self, nil: bool) -> None:
        """``null`` (nil) or ``[]`` (a new empty slice): no element stays."""
        self.backing, self.length, self.nil = [], 0, nil

    def decode(self, items: list[R], into: Callable[[T | None, R], T]) -> None:
        """Decode ``items`` into the slice; ``into(old, item)``: an element decoded into, ``old``
        None for an element never decoded into (Go's zero value)."""
        if not items:
            self.reset(nil=False)
            return
        backing = self.backing
        for index, item in enumerate(items):
            if index < len(backing):
                backing[index] = into(backing[index], item)
            else:
                backing.append(into(None, item))
        self.length, self.nil = len(items), False

    def value(self) -> list[T] | None:
        return None if self.nil else self.backing[: self.length]


def strings_into(into: GoSlice[str], raw: _Buf, where: str) -> None:
    """A ``[]string`` (or ``*[]string``) field's next occurrence decoded into ``into``."""
    if not into.backing:  # nothing to decode into: the one C pass
        items = _string_list(raw, where)
        if items is None:
            into.reset(nil=True)
        else:
            into.backing, into.length, into.nil = items, len(items), False
        return
    found = _string_items(raw, where)
    if found is None:
        into.reset(nil=True)
    else:
        into.decode(found, _string_into)


def _string_into(old: str | None, new: str | None) -> str:
    return new if new is not None else old or ""


def object_into(old: bytes | None, new: bytes) -> bytes:
    """A struct element's bytes after ``new`` (an object or null) is decoded into it."""
    if old is None or new == b"null":
        return old if old is not None else new
    if old == b"null":
        return new
    before, after = _inner(old), _inner(new)
    if not after:
        return old
    if not before:
        return new
    return b"{" + before + b"," + after + b"}"


def _inner(obj: bytes) -> bytes:
    """An object's pairs as they are written (``{`` and ``}`` and the space around them taken off)."""
    return bytes(_trim(_trim(obj)[1:-1]))
