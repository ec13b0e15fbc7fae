"""Indexing, after the fact, the calls the node index cannot speak for (`manage.py index_nodes`).

Calls recorded while EXTPROXY_NODE_INDEX=0, and replays recorded before the replay runner
indexed them, have no node set: a `?node=` listing never finds them, and every node-filtered
export whose range holds one is `complete: false` for good. Their stored rows still say which
nodes they involved: the request's nodes (read back from the stored request, as the recorder
read them: recording/rows.read_request) and the stored decisions' (node, verdict) pairs. From
those this module builds the same pairs the recorder would have built, so a call gets the very
set a call recorded with the index on would have (the same digest), and stores it through
`NodeSets.assign`, as the recorder does.

A raw record (its reply could not be read, so the recorder built no pairs) is indexed by its
request's nodes when that request reads, with no verdict: a `?node=` listing then finds it, as it
involved the node. What stays unindexed, counted: a record with no node in its request (one the
scheduler's decoder refuses) or its decisions, and a stored request that no longer reads back.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

from django.db import transaction

from . import nodeindex
from .bodies import request_of
from .models import Call
from .recording.rows import read_request
from .recording.trace import Trace

CHUNK = 500  # calls per transaction: bounded memory, and the recorder's batches wait little


@dataclass
class Backfill:
    indexed: int = 0  # given a set
    unread: int = 0  # no node in their request or their decisions: left unindexed
    failed: int = 0  # their stored request could not be read back: left unindexed

    @property
    def left(self) -> int:
        return self.unread + self.failed


def stored_pairs(call: Call) -> tuple[list[tuple[str, str]], str | None]:
    """The (node, verdict) pairs the recorder would have indexed `call` by, and their digest."""
    stored = SimpleNamespace(verb=call.verb, request_body=request_of(call).data)
    nodes = read_request(cast(Trace, stored))["nodes"]
    decisions = call.decisions()
    seen = {(str(d["node"])[:253], str(d.get("result") or "")) for d in decisions if d.get("node")}
    pairs = nodeindex.with_request_nodes(seen, {str(d.get("node") or "") for d in decisions}, nodes)
    return pairs, (nodeindex.digest_of(pairs) if pairs else None)


def _candidates(since: Any = None, until: Any = None) -> Iterator[list[Call]]:
    """The calls without a set that had nodes or were never read, in chunks by id (rows read
    once each: a call left unindexed is not read again by the next chunk)."""
    calls = Call.objects.filter(nodeindex.without_set())
    if since is not None:
        calls = calls.filter(started_at__gte=since)
    if until is not None:
        calls = calls.filter(started_at__lt=until)
    after = 0
    while True:
        chunk = list(calls.filter(pk__gt=after).order_by("pk")[:CHUNK])
        if not chunk:
            return
        yield chunk
        after = chunk[-1].pk


def backfill(since: Any = None, until: Any = None, sets: nodeindex.NodeSets | None = None) -> Backfill:
    sets = sets or nodeindex.NodeSets()
    result = Backfill()
    for chunk in _candidates(since, until):
        ready = []
        for call in chunk:
            try:
                pairs = stored_pairs(call)
            except Exception:  # a stored request that no longer reads back: counted, left as it is
                result.failed += 1
                continue
            if pairs[1] is None:
                result.unread += 1  # no node in its request or its decisions: nothing to index by
                continue
            call._node_pairs = pairs  # what NodeSets.assign reads, as from the recorder's rows
            ready.append(call)
        with transaction.atomic():
            sets.assign(ready)
            Call.objects.bulk_update(ready, ["node_set"], batch_size=CHUNK)
        result.indexed += len(ready)
    return result
