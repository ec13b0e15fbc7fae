"""A decoder that counts what it decodes, for tests that a reader did not read something again."""
from __future__ import annotations

from typing import Any


def count_decodes(monkeypatch: Any, module: Any, name: str) -> list[int]:
    """Put a counting wrapper in place of the decoder `module.name`; returns the list to which
    it appends the length of each buffer it decodes."""
    decoded: list[int] = []
    real = getattr(module, name)

    class Counting:
        def decode(self, raw):
            decoded.append(len(raw))
            return real.decode(raw)

    monkeypatch.setattr(module, name, Counting())
    return decoded
