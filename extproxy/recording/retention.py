"""Retention: delete calls older than `maxAge`, beyond the newest `maxCalls` (recordings and
replays each counted on their own), or the oldest
while the store is above `maxBytes` (each deletion noted as a gap, see extproxy/pruning.py),
then the Node objects no kept call can refer to (and the node index's sets none does), and audit events past `auditMaxAge`.

A Node object's `last_seen` is refreshed at most every TOUCH_EVERY seconds while calls carry
it, and when a recorder that did not remember it stores it again (writer.py), so every node a
kept call refers to has last_seen >= (that call's time - TOUCH_EVERY). Nodes older than the
oldest kept call by more than that are safe to delete. A recorder that still remembers one
deleted here finds it gone when it next refreshes it, and stores it again. Deletes go in
chunks so that a large backlog never holds the database's write lock for long, and pass over
rows a recorder is refreshing. Safe to run from several replicas at once. Runs in the recorder
process (every PRUNE_EVERY) and from `manage.py prune`; must not run on the hot path.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from ..config import RetentionConfig

CHUNK = 2000
TOUCH_EVERY = 600.0  # seconds between last_seen refreshes of a node in use
PRUNE_EVERY = 60.0  # seconds between retention passes of the recorder


@dataclass
class Pruned:
    calls: int = 0
    nodes: int = 0
    node_sets: int = 0
    audit_events: int = 0


def prune(retention: RetentionConfig, now: datetime | None = None) -> Pruned:
    from ..models import Call, NodeObject, NodeSet
    from ..pruning import delete_calls, prune_audit, prune_to_size

    now = now or timezone.now()
    result = Pruned()
    if retention.max_age_seconds > 0:
        cutoff = now - timedelta(seconds=retention.max_age_seconds)
        # Replays are not the scheduler's calls: their pruning is no gap in an export of those.
        result.calls += delete_calls(Call.objects.filter(started_at__lt=cutoff, is_replay=False), "pruned-age")
        result.calls += delete_calls(Call.objects.filter(started_at__lt=cutoff, is_replay=True), None)
    if retention.max_calls > 0:
        # Recordings and replays are counted apart, each kept to its newest maxCalls: counted
        # together, one replay run of the whole store evicted every recording it replayed.
        for is_replay in (False, True):
            calls = Call.objects.filter(is_replay=is_replay)
            boundary = calls.order_by("-started_at", "-id").values_list("started_at", flat=True)[
                retention.max_calls : retention.max_calls + 1
            ]
            if boundary:
                result.calls += delete_calls(calls.filter(started_at__lte=boundary[0]),
                                             None if is_replay else "pruned-count")
    if retention.max_bytes > 0:
        result.calls += prune_to_size(retention.max_bytes)
    oldest = Call.objects.order_by("started_at").values_list("started_at", flat=True).first()
    node_cutoff = (oldest or now) - timedelta(seconds=TOUCH_EVERY * 2)
    result.nodes = _delete_chunks(NodeObject.objects.filter(last_seen__lt=node_cutoff))
    unused = ~Exists(Call.objects.filter(node_set=OuterRef("pk")))
    result.node_sets = _delete_chunks(NodeSet.objects.filter(unused, last_seen__lt=node_cutoff))
    result.audit_events = prune_audit(retention.audit_max_age_seconds, now)
    return result


def _delete_chunks(queryset) -> int:
    """Delete the rows `queryset` selects, CHUNK in a transaction; the number deleted.

    A recorder elsewhere (another replica's, or this one's while `manage.py prune` runs) may be
    refreshing the last_seen of a row that matches here, in order to refer to it. On PostgreSQL
    each chunk is locked as it is selected, passing over rows such an open transaction holds
    (waiting for it would only delete what it refreshed), and no recorder can refresh a locked
    row until the chunk is gone; SQLite lets one writer in at a time. The delete repeats the
    conditions all the same, so a row that no longer matches is never deleted.
    """
    total = 0
    label = queryset.model._meta.label
    while True:
        with transaction.atomic():
            keys = list(queryset.select_for_update(skip_locked=True).values_list("pk", flat=True)[:CHUNK])
            if not keys:
                return total
            deleted = queryset.filter(pk__in=keys).delete()[1].get(label, 0)
        total += deleted
        if not deleted:  # none of what was locked went: stop rather than select it again and again
            return total
