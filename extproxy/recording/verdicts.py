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
from ..protocol import RecentBytes

MAX_DECISIONS = 200_000  # decisions held across all remembered verdicts (~40 MB)
# Replies of at least this many bytes are first compared with the last few such replies, byte
# for byte, before their key is hashed: a full-object reply (a NodeList of every Node that fit)
# comes again and again, and hashing 2.9 MB took 2 ms of its call's 15 ms of recording, where
# comparing takes a tenth of that.
COMPARE_FROM = 64 << 10
COMPARED = 4  # such replies kept (with their request's node names) to compare with,
COMPARED_BYTES = 32 << 20  # of this many bytes in all, so each of 8 MiB at most (RecentBytes' quarter)


class VerdictMemo:
    def __init__(self, max_decisions: int = MAX_DECISIONS) -> None:
        self._verdicts: OrderedDict[bytes, semantics.Verdict] = OrderedDict()
        self._extras: dict[int, dict] = {}  # id(held verdict) -> what callers derived from it
        self._max = max_decisions
        self.held = 0  # decisions held
        self.hits = self.misses = 0
        self._compared = RecentBytes(COMPARED, COMPARED_BYTES)  # reply -> (what, status, nodes, key)

    def judge(self, what: tuple, status: int, reply: bytes, nodes: list[str],
              compute: Callable[[], semantics.Verdict]) -> semantics.Verdict:
        """`compute()`'s verdict, or the one it gave before for the same inputs.

        `what`: everything else the verdict depends on (verb, backend, mode, weight)."""
        key = self._key(what, status, reply, nodes)
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

    def _key(self, what: tuple, status: int, reply: bytes, nodes: list[str]) -> bytes:
        large = len(reply) >= COMPARE_FROM
        if large:
            known = self._compared.find(reply, lambda made: made[0] == what and made[1] == status and made[2] == nodes)
            if known is not None:
                return known[3]
        h = hashlib.sha256(msgspec.msgpack.encode([list(what), status, nodes]))
        h.update(reply)
        key = h.digest()
        if large:  # the node names copied: the caller keeps its list
            size = len(reply) + sum(64 + len(name) for name in nodes)
            self._compared.keep(reply, (what, status, list(nodes), key), size)
        return key

    def extras(self, verdict: semantics.Verdict | None) -> dict | None:
        """A place to keep what is derived from a held verdict and its inputs alone (the stored
        decisions, the reply's stored form under given rules), dropped with it; None when
        `verdict` is not held. Values kept there must be small (callers bound them)."""
        return None if verdict is None else self._extras.get(id(verdict))
