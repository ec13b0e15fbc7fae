"""Verdicts remembered by what decides them, so a reply seen before is not judged again.

The scheduler sends many calls whose filter or prioritize verdict is the same: other pods
against the same candidate nodes, answered with the same bytes (a backend that passes every
node of a names-mode list answers every such pod alike), and the same pod again while it is
Pending. A verdict depends only on the backend as recorded, the status, the reply's bytes and
the request's node names, so those, hashed, are the key. Bounded by the decisions it holds
(least recently used out first). The verdicts handed out are shared: callers must not change
them (rows.py copies what it extends).
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Callable

import msgspec

from .. import semantics

MAX_DECISIONS = 200_000  # decisions held across all remembered verdicts (~40 MB)


class VerdictMemo:
    def __init__(self, max_decisions: int = MAX_DECISIONS) -> None:
        self._verdicts: OrderedDict[bytes, semantics.Verdict] = OrderedDict()
        self._extras: dict[int, dict] = {}  # id(held verdict) -> what callers derived from it
        self._max = max_decisions
        self.held = 0  # decisions held
        self.hits = self.misses = 0

    def judge(self, what: tuple, status: int, reply: bytes, nodes: list[str],
              compute: Callable[[], semantics.Verdict]) -> semantics.Verdict:
        """`compute()`'s verdict, or the one it gave before for the same inputs.

        `what`: everything else the verdict depends on (verb, backend, mode, weight)."""
        h = hashlib.sha256(msgspec.msgpack.encode([list(what), status, nodes]))
        h.update(reply)
        key = h.digest()
        known = self._verdicts.get(key)
        if known is not None:
            self._verdicts.move_to_end(key)
            self.hits += 1
            return known
        self.misses += 1
        verdict = compute()
        size = len(verdict.decisions) + 1
        if size <= self._max // 16:
            self._verdicts[key] = verdict
            self._extras[id(verdict)] = {}
            self.held += size
            while self.held > self._max:
                old = self._verdicts.popitem(last=False)[1]
                self._extras.pop(id(old), None)
                self.held -= len(old.decisions) + 1
        return verdict

    def extras(self, verdict: semantics.Verdict | None) -> dict | None:
        """A place to keep what is derived from a held verdict and its inputs alone (the stored
        decisions, the reply's stored form under given rules), dropped with it; None when
        `verdict` is not held. Values kept there must be small (callers bound them)."""
        return None if verdict is None else self._extras.get(id(verdict))
