"""Gaps in the records: calls the recorder dropped or retention pruned, kept as RecordingGap
rows (reason, count, time range) so an export can say its range is not complete.

Writers: the recorder process (`note_drops`, in the transaction of the batch that carried
them): the serving process's drops from the gap records it spools (queue-full, spool-full,
spool-error, stopping, unencodable, and killed: what a killed process of the same spool
directory left, recording/unsettled.py; one row per reason per gap record, i.e. per second at most,
see recording/dropcount.py) and its own (torn, unreadable, unstorable: one row each), each row
keyed by where its drop was found; retention (`note_gap`, reasons pruned-*, merged, no key; audit-pruned-age for the audit
trail's own). Readers: export manifests (`gaps_overlapping`), GET /api/gaps/ (api/gaps.py), the
dashboard's warnings and audit page; each says which KIND a row is (`kind_of`, `of_kind`).
This module must not delete or alter call records.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone as tz
from typing import Any, NamedTuple

from django.db.models import F, Q, Sum
from django.utils import timezone

from .timetext import iso_z

# A retention gap row covers at most one such bucket of time (UTC hours): a row counts whole in
# any export overlapping it, so an export of one hour counts at most the calls pruned in the
# hours it touches, not those of a row grown over days.
MERGE_BUCKET = timedelta(hours=1)


def bucket_of(when: datetime) -> datetime:
    return when.replace(minute=0, second=0, microsecond=0)


def note_gap(reason: str, calls: int, first_at: datetime, last_at: datetime, merge: bool = False) -> None:
    """Record that `calls` calls between first_at and last_at are missing for `reason`.

    merge: extend the reason's latest gap when this one starts at or after its end and both lie
    in one MERGE_BUCKET (retention deletes oldest first, every minute: one row per reason per
    hour of calls deleted instead of one row a minute). The caller splits what spans buckets.
    """
    from .models import RecordingGap

    if calls <= 0:
        return
    first_at, last_at = min(first_at, last_at), max(first_at, last_at)
    if merge:
        latest = RecordingGap.objects.filter(reason=reason[:64]).order_by("-last_at", "-id").first()
        if latest is not None and latest.last_at <= first_at and bucket_of(latest.first_at) == bucket_of(last_at):
            RecordingGap.objects.filter(pk=latest.pk).update(
                calls=F("calls") + calls, last_at=last_at, noted_at=timezone.now())
            return
    RecordingGap.objects.create(reason=reason[:64], calls=calls, first_at=first_at, last_at=last_at,
                                noted_at=timezone.now())


class Drop(NamedTuple):
    """Calls dropped for one reason, found at one place; stored as one RecordingGap row."""

    reason: str
    calls: int
    first: float  # the first and last drop, epoch seconds
    last: float
    found: str  # where: a spool record's "writer/seq", a torn tail's "writer/segment/offset", ...


def drop_key(drop: Drop) -> str:
    """The row's key: the same drop read again (the same place, reason and first time) gives the
    same key, and two drops alike in count and times but found apart give two."""
    text = f"{drop.found}\0{drop.reason}\0{drop.first!r}"
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def note_drops(drops: Iterable[Drop]) -> int:
    """Store dropped calls as gap rows, one per Drop.

    A drop whose key is stored already is not stored again: the recorder reads a batch again
    after it stopped between the batch's commit and moving the spool cursor. Returns the rows
    added.
    """
    from .models import RecordingGap

    keyed = {drop_key(d): d for d in drops if d.calls > 0}
    if not keyed:
        return 0
    stored: set[str] = set()
    keys = list(keyed)
    for start in range(0, len(keys), 500):
        stored.update(RecordingGap.objects.filter(key__in=keys[start : start + 500]).values_list("key", flat=True))
    now = timezone.now()
    rows = []
    for key, d in keyed.items():
        if key in stored:
            continue
        first_at, last_at = (datetime.fromtimestamp(t, tz.utc) for t in (min(d.first, d.last), max(d.first, d.last)))
        rows.append(RecordingGap(reason=d.reason[:64], calls=d.calls, first_at=first_at, last_at=last_at,
                                 noted_at=now, key=key))
    RecordingGap.objects.bulk_create(rows)
    return len(rows)


AUDIT_PREFIX = "audit-"  # a gap in the audit trail (its retention), not in the calls
# What a gap row is missing, named as the export that counts it: "calls" (calls dropped or
# pruned) or "audit" (audit events the audit trail's own retention deleted: no call is missing).
KINDS = ("calls", "audit")


def kind_of(reason: str) -> str:
    return "audit" if reason.startswith(AUDIT_PREFIX) else "calls"


def of_kind(kind: str) -> Q:
    """The gap rows of one of KINDS: every reader that speaks of lost calls reads "calls" only."""
    audit = Q(reason__startswith=AUDIT_PREFIX)
    return audit if kind == "audit" else ~audit


def gaps_overlapping(since: datetime | None, until: datetime | None, kind: str = "calls") -> list[dict[str, Any]]:
    """Per reason: records missing in gaps overlapping [since, until), and the span they cover;
    kind "calls" (dropped or pruned calls, counted in `calls`) or "audit" (pruned audit events,
    counted in `events`: no call is missing). Manifests made before audit gaps said `events`
    count them in `calls`; exportproof reads both."""
    from .models import RecordingGap

    gaps = RecordingGap.objects.filter(of_kind(kind))
    count_key = "events" if kind == "audit" else "calls"
    if since is not None:
        gaps = gaps.filter(last_at__gte=since)
    if until is not None:
        gaps = gaps.filter(first_at__lt=until)
    found = []
    for row in gaps.values("reason").annotate(calls=Sum("calls")).order_by("reason"):
        of_reason = gaps.filter(reason=row["reason"])
        first = of_reason.order_by("first_at").values_list("first_at", flat=True).first()
        last = of_reason.order_by("-last_at").values_list("last_at", flat=True).first()
        found.append({"reason": row["reason"], count_key: row["calls"], "first_at": iso_z(first), "last_at": iso_z(last)})
    return found
