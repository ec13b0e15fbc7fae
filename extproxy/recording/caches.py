"""What the recorder remembers by bytes: a bound by size (BytesBoundedLRU), and the redaction of
a body's field remembered by its bytes (RedactionCache), with the values it removed.
Pure: no database, no I/O."""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from .. import bodyformat
from ..redaction import collecting, noted


class BytesBoundedLRU:
    """Values by key, bounded by the bytes they are said to take (least recently used out
    first); a single value larger than an eighth of the bound is not kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: bytes) -> tuple[bool, Any]:
        """(found, value)."""
        known = self._items.get(key)
        if known is None:
            return False, None
        self._items.move_to_end(key)
        return True, known[0]

    def put(self, key: bytes, value: Any, size: int) -> None:
        if size > self.max_bytes // 8 or key in self._items:
            return
        self._items[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self.bytes -= self._items.popitem(last=False)[1][1]


class RedactionCache:
    """A bodyformat.Redactor that remembers its answers by (field, SHA-256 of the bytes).

    The same Pod bytes arrive many times (filter, prioritize, bind, each backend, and again on
    every retry while the Pod is Pending); redacting and diffing it is most of what recording
    a names-mode call costs. Bounded by the bytes it keeps (BytesBoundedLRU).
    """

    def __init__(self, redact: bodyformat.Redactor, max_bytes: int) -> None:
        self._redact = redact
        self._answers = BytesBoundedLRU(max_bytes)
        self.hits = self.misses = 0

    @property
    def kept_bytes(self) -> int:
        return self._answers.bytes

    def __call__(self, name: str, value: bytes) -> tuple[bytes, list[str]] | None:
        key = name.encode() + b"\0" + hashlib.sha256(value).digest()
        found, answer = self._answers.get(key)
        if found:
            self.hits += 1
            if answer is None:
                return None
            noted(answer[2])  # what redacting it removed, for the call's echoes (redaction.Echoes)
            return answer[0], list(answer[1])
        self.misses += 1
        with collecting() as removed:
            answer = self._redact(name, value)
        if answer is None:
            self._answers.put(key, None, 128 + len(key))
            return None
        kept = tuple(dict.fromkeys(removed))
        noted(kept)
        size = 128 + len(key) + len(answer[0]) + sum(len(m) + 64 for m in answer[1]) + sum(len(v) + 64 for v in kept)
        self._answers.put(key, (answer[0], list(answer[1]), kept), size)
        return answer
