"""Deleting records for retention, leaving a trace: calls go in chunks, each chunk noted as a
gap (reason pruned-age, pruned-count or pruned-size) in the same transaction, so an export
of that range says it is not complete; the size bound; the audit trail's own retention.

Size is what retention can free: the stored (compressed) bodies and decisions of calls and
backend calls, and the distinct Node objects. It is not the database file's size (SQLite
reuses freed pages; PostgreSQL's autovacuum does). Called by retention.prune (the writer, every
minute, and `manage.py prune`). Must not run on the hot path.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import IntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Length

from .gaps import bucket_of, note_gap

CHUNK = 2000
AUDIT_GAP = "audit-pruned-age"  # gaps.AUDIT_PREFIX: reported by audit exports, not by call exports


def _bytes(*fields: str):
    total = Value(0)
    for name in fields:
        total = total + Coalesce(Length(name), Value(0))
    return total


CALL_BYTES = ("request_body", "response_body", "decisions_blob")


def stored_bytes() -> int:
    """Bytes retention can free: bodies and decisions (calls, backend calls) and Node objects."""
    from .models import BackendCall, Call, NodeObject

    total = 0
    for model, fields in ((Call, CALL_BYTES), (BackendCall, CALL_BYTES), (NodeObject, ("data",))):
        total += model.objects.aggregate(n=Coalesce(Sum(_bytes(*fields), output_field=IntegerField()), 0))["n"]
    return int(total)


def delete_calls(queryset, reason: str | None) -> int:
    """Delete the calls of `queryset`, oldest first, in chunks; each chunk is noted as a gap of
    `reason` (None: no gap, for replays, which are not in the record of the scheduler's calls)."""
    from .models import Call

    total = 0
    while True:
        chunk = list(queryset.order_by("started_at", "id").values_list("pk", "started_at")[:CHUNK])
        if not chunk:
            return total
        with transaction.atomic():
            # What this pass deleted, not what it picked: another pass (a replica's recorder,
            # `manage.py prune`) may have deleted some of the chunk since, and noted them itself.
            _, per_model = Call.objects.filter(pk__in=[pk for pk, _ in chunk]).delete()
            deleted = per_model.get(Call._meta.label, 0)
            if reason is not None:
                note_gaps_by_bucket(reason, deleted, chunk)
        total += deleted


def note_gaps_by_bucket(reason: str, deleted: int, chunk: list[tuple[Any, datetime]]) -> None:
    """The chunk's deletions as gaps, one per hour bucket (gaps.MERGE_BUCKET) its times touch:
    sparse records made one chunk span days, counted whole by an export of any hour of them.
    `deleted` may be fewer than the chunk (another pass deleted some): the first buckets take
    them (which of the chunk that pass took is not known)."""
    buckets: dict[datetime, list[datetime]] = {}
    for _, when in chunk:
        buckets.setdefault(bucket_of(when), []).append(when)
    for times in buckets.values():
        calls = min(deleted, len(times))
        note_gap(reason, calls, times[0], times[-1], merge=True)
        deleted -= calls


def prune_to_size(max_bytes: int) -> int:
    """Delete the oldest calls until what is stored fits in max_bytes; returns calls deleted.

    Node objects are freed afterwards by the node pass of retention (once no kept call is
    recent enough to refer to them), so a pass may leave the store somewhat above the bound
    until the next one.
    """
    from .models import BackendCall, Call

    excess = stored_bytes() - max_bytes
    deleted = 0
    if max_bytes <= 0 or excess <= 0:
        return 0
    children = (
        BackendCall.objects.filter(call=OuterRef("pk")).values("call")
        .annotate(n=Sum(_bytes(*CALL_BYTES), output_field=IntegerField())).values("n")
    )
    size = _bytes(*CALL_BYTES) + Coalesce(Subquery(children, output_field=IntegerField()), Value(0))
    while excess > 0:
        chunk = list(Call.objects.order_by("started_at", "id").annotate(size=size).values_list("pk", "size")[:CHUNK])
        if not chunk:
            break
        take = []
        for pk, call_bytes in chunk:
            take.append(pk)
            excess -= call_bytes or 0
            if excess <= 0:
                break
        deleted += delete_calls(Call.objects.filter(pk__in=take), "pruned-size")
    return deleted


def prune_audit(max_age_seconds: float, now: datetime) -> int:
    """Delete audit events older than the audit trail's own retention; each chunk is noted as a
    gap (audit-pruned-age) with it, and the deletion itself is recorded as an event (auditors see
    that, and how much, was pruned; an audit export of that range is not complete)."""
    from .audit import audit
    from .models import AuditEvent

    if max_age_seconds <= 0:
        return 0
    cutoff = now - timedelta(seconds=max_age_seconds)
    total = 0
    while True:
        chunk = list(AuditEvent.objects.filter(at__lt=cutoff).order_by("at", "id").values_list("pk", "at")[:CHUNK])
        if not chunk:
            break
        with transaction.atomic():  # as calls: each chunk deleted is a gap an audit export reports
            _, per_model = AuditEvent.objects.filter(pk__in=[pk for pk, _ in chunk]).delete()
            deleted = per_model.get(AuditEvent._meta.label, 0)
            note_gaps_by_bucket(AUDIT_GAP, deleted, chunk)
        total += deleted
    if total:
        audit(None, "audit-pruned", target=f"events before {cutoff.isoformat()}", actor="retention",
              source="retention", detail={"events": total, "max_age_days": round(max_age_seconds / 86400, 3)})
    return total


__all__ = ["delete_calls", "prune_audit", "prune_to_size", "stored_bytes"]
