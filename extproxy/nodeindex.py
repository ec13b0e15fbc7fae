"""The node index (models.NodeSet): which calls involved a node, with each verdict given it.

A call's index is the set of its (node, verdict) pairs. Calls mostly repeat a set (the same
candidate nodes with the same verdicts), so each distinct set is stored once (NodeSet, one
NodeSetEntry per pair) and a call carries the set's id (Call.node_set): the usual cost of
indexing a call is one integer in its row; a new set costs one row per pair, once.

`NodeSets.assign` is called by the recorder inside the batch's transaction, before the Call
rows are inserted (and by the replay runner for each replay it records, replay/storing.store). It remembers the ids of sets it has stored (bounded); it forgets them when
the transaction does not commit, and refreshes a set's last_seen at most every TOUCH_EVERY
while calls use it, so retention (which deletes sets no kept call refers to) never deletes a
set it remembers. Off with EXTPROXY_NODE_INDEX=0. This module must not decide verdicts: it
stores the decisions the recorder built.

Readers: `involving` (the calls whose set names a node) and `unindexed` (the calls no set speaks
for: recorded while the index was off, replays recorded before replays were indexed, records
whose request was never read, sets gone),
so that whoever promises completeness (exports) can say what the index cannot.
"""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import msgspec
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q

from .recording.bulk import storable_text
from .recording.retention import TOUCH_EVERY  # retention keeps a set seen within twice this
from .semantics import Decision, Result

CHUNK = 500  # digests per query
ENTRY_CHUNK = 5000  # entry rows per executemany
CACHE_SETS = 20_000  # set ids remembered
_VALUES = {r: r.value for r in Result}


def pairs_for(decisions: Sequence[Decision], nodes: Iterable[str]) -> list[tuple[str, str]]:
    """The call's distinct (node, result) pairs, sorted; request nodes with no decision get ""."""
    value = _VALUES  # an enum's .value is a descriptor call; a dict lookup is not
    seen = {(d.node[:253], value[d.result]) for d in decisions if d.node}
    return with_request_nodes(seen, {d.node for d in decisions}, nodes)


def with_request_nodes(seen: set[tuple[str, str]], judged: set[str], nodes: Iterable[str]) -> list[tuple[str, str]]:
    """`seen` (the judged pairs) and the request's nodes no decision named, with "", sorted: the
    last step of `pairs_for`, shared with the pairs read back from a stored call (nodeindex_backfill)."""
    seen.update((str(node)[:253], "") for node in nodes if node and node not in judged)
    return sorted(seen)


def digest_of(pairs: list[tuple[str, str]]) -> str:
    return hashlib.sha256(msgspec.json.encode(pairs)).hexdigest()


def pairs_and_digest(decisions: Sequence[Decision], nodes: Iterable[str]) -> tuple[list[tuple[str, str]], str | None]:
    """What `NodeSets.assign` reads from a call (`call._node_pairs`); digest None: no pairs."""
    pairs = pairs_for(decisions, nodes)
    return pairs, (digest_of(pairs) if pairs else None)


def involving(node: str, verdict: str | None = None) -> Q:
    """Calls whose set pairs `node` (with `verdict`, when given): what `?node=` selects."""
    from .models import NodeSetEntry

    entries = NodeSetEntry.objects.filter(node=node)
    if verdict:
        entries = entries.filter(result=verdict)
    return Q(node_set__in=entries.values("node_set_id"))


UNINDEXED_REASON = ("not in the node index (recorded while EXTPROXY_NODE_INDEX=0, replays recorded before replays "
                    "were indexed, records whose request was not read, node sets gone): whether they involved the "
                    "node is not known; `manage.py index_nodes` indexes those whose stored request reads")


def unindexed() -> Q:
    """Calls the index cannot speak for, which `involving` never finds whatever nodes they had:

    - no set although the call had nodes or verdicts: recorded while the index was off
      (EXTPROXY_NODE_INDEX=0), or a replay recorded before the runner indexed replays;
    - no set, no nodes and no pod: a record whose request was never read (a raw record, a
      request the scheduler's decoder would refuse), whose nodes are not known;
    - a set that is gone (the call refers to a set id no longer stored).

    A call that truly named no node (a bind to "", a request with no nodes) has a pod, and is
    not among them."""
    from .models import NodeSet

    gone = ~Exists(NodeSet.objects.filter(pk=OuterRef("node_set_id")))
    return without_set() | (Q(node_set__isnull=False) & gone)


def without_set() -> Q:
    """`unindexed` but for sets gone: read from each call's own row, no subquery, so that a
    listing can count them cheaply (sets go only when no kept call refers to them)."""
    had_nodes = Q(node_count__gt=0) | Q(passed_count__gt=0) | Q(failed_count__gt=0) | Q(unresolvable_count__gt=0)
    never_read = Q(node_count=0, pod_uid="")
    return Q(node_set__isnull=True) & (had_nodes | never_read)


class NodeSets:
    """Gives each call of a batch its NodeSet, storing the sets not stored yet."""

    def __init__(self, cache_size: int = CACHE_SETS) -> None:
        self._known: OrderedDict[str, tuple[int, float]] = OrderedDict()  # digest -> (id, last touched)
        self._cache_size = cache_size

    def assign(self, calls: Iterable) -> None:
        """Set `node_set_id` on each call from its `_node_pairs` (pairs_and_digest)."""
        from django.conf import settings

        if not settings.EXTPROXY_NODE_INDEX:
            return
        now = time.monotonic()
        wanted: dict[str, list[tuple[str, str]]] = {}
        per_call = []
        for call in calls:
            pairs, digest = getattr(call, "_node_pairs", None) or ([], None)
            if digest is not None and digest not in wanted:
                wanted[digest] = pairs
            per_call.append((call, digest))
        ids: dict[str, int] = {}
        unknown = []
        for digest in wanted:
            known = self._known.get(digest)
            if known is not None and now - known[1] < TOUCH_EVERY:
                ids[digest] = known[0]
                self._known.move_to_end(digest)
            else:
                unknown.append(digest)
        stored = self._store(unknown, wanted) if unknown else {}
        ids.update(stored)
        for call, digest in per_call:
            call.node_set_id = ids[digest] if digest is not None else None
        if stored:
            transaction.on_commit(lambda: self._remember(stored, now))

    def _remember(self, stored: dict[str, int], when: float) -> None:
        for digest, pk in stored.items():
            self._known[digest] = (pk, when)
            self._known.move_to_end(digest)
        while len(self._known) > self._cache_size:
            self._known.popitem(last=False)

    @staticmethod
    def _store(digests: list[str], pairs: dict[str, list[tuple[str, str]]]) -> dict[str, int]:
        """Ids of these sets, each refreshed or inserted with its entries (several writers may race)."""
        from django.utils import timezone

        from .models import NodeSet, NodeSetEntry

        now = timezone.now()
        ids: dict[str, int] = {}
        for start in range(0, len(digests), CHUNK):
            # Refreshed before their ids are read: a set this transaction refreshed is one a
            # retention pass elsewhere leaves (it skips rows locked and checks last_seen again);
            # one it deleted first is not found here, and is stored anew below.
            chunk = digests[start : start + CHUNK]
            NodeSet.objects.filter(digest__in=chunk).update(last_seen=now)
            ids.update(NodeSet.objects.filter(digest__in=chunk).values_list("digest", "pk"))
        q = connection.ops.quote_name
        sets, entries = q(NodeSet._meta.db_table), q(NodeSetEntry._meta.db_table)
        insert_set = (f"INSERT INTO {sets} (digest, size, last_seen) VALUES (%s, %s, %s) "
                      f"ON CONFLICT (digest) DO NOTHING")
        rows: list[tuple[int, str, str]] = []
        with connection.cursor() as cursor:
            for digest in digests:
                if digest in ids:
                    continue
                cursor.execute(insert_set, (digest, len(pairs[digest]), connection.ops.adapt_datetimefield_value(now)))
                mine = cursor.rowcount == 1  # another writer stored it first: its entries are there
                ids[digest] = NodeSet.objects.filter(digest=digest).values_list("pk", flat=True).get()
                if mine:
                    rows += [(ids[digest], storable_text(node), result) for node, result in pairs[digest]]
                if len(rows) >= ENTRY_CHUNK:
                    cursor.executemany(f"INSERT INTO {entries} (node_set_id, node, result) VALUES (%s, %s, %s)", rows)
                    rows = []
            if rows:
                cursor.executemany(f"INSERT INTO {entries} (node_set_id, node, result) VALUES (%s, %s, %s)", rows)
        return ids
