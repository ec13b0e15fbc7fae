"""Gaps in the records: calls the recorder dropped or retention pruned, kept as RecordingGap
rows (reason, count, time range) so an export can say its range is not complete.

Writers: the recorder process (`note_drops`, in the transaction of the batch that carried
them): the serving process's drops from the gap records it spools (queue-full, spool-full,
spool-error, stopping, unencodable: one row per reason per gap record, i.e. per second at most,
see recording/dropcount.py) and its own (torn, unreadable); retention (`note_gap`, reasons
pruned-*). Readers: export manifests (`gaps_overlapping`), GET /api/gaps/ (api/gaps.py).
This module must not delete or alter call records.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone as tz
from typing import Any

from django.db.models import F, Sum
from django.utils import timezone


def note_gap(reason: str, calls: int, first_at: datetime, last_at: datetime, merge: bool = False) -> None:
    """Record that `calls` calls between first_at and last_at are missing for `reason`.

    merge: extend the reason's latest gap when this one starts at or after its end (retention
    deletes oldest first, every minute: one growing row instead of one row a minute).
    """
    from .models import RecordingGap

    if calls <= 0:
        return
    first_at, last_at = min(first_at, last_at), max(first_at, last_at)
    if merge:
        latest = RecordingGap.objects.filter(reason=reason[:64]).order_by("-last_at", "-id").first()
        if latest is not None and latest.last_at <= first_at:
            RecordingGap.objects.filter(pk=latest.pk).update(
                calls=F("calls") + calls, last_at=last_at, noted_at=timezone.now())
            return
    RecordingGap.objects.create(reason=reason[:64], calls=calls, first_at=first_at, last_at=last_at,
                                noted_at=timezone.now())


def note_drops(drops: Iterable[tuple[str, int, float, float]]) -> int:
    """Store dropped calls, each (reason, calls, first and last drop in epoch seconds), as gap rows.

    A row with the very same values is already there when a batch is read again after the
    recorder stopped between its commit and moving the spool cursor: not stored twice.
    Returns the rows added.
    """
    from .models import RecordingGap

    added = 0
    for reason, calls, first, last in drops:
        if calls <= 0:
            continue
        first_at, last_at = (datetime.fromtimestamp(t, tz.utc) for t in (min(first, last), max(first, last)))
        if RecordingGap.objects.filter(reason=reason[:64], calls=calls, first_at=first_at, last_at=last_at).exists():
            continue
        RecordingGap.objects.create(reason=reason[:64], calls=calls, first_at=first_at, last_at=last_at,
                                    noted_at=timezone.now())
        added += 1
    return added


def gaps_overlapping(since: datetime | None, until: datetime | None) -> list[dict[str, Any]]:
    """Per reason: calls missing in gaps overlapping [since, until), and the span they cover."""
    from .models import RecordingGap

    gaps = RecordingGap.objects.all()
    if since is not None:
        gaps = gaps.filter(last_at__gte=since)
    if until is not None:
        gaps = gaps.filter(first_at__lt=until)
    found = []
    for row in gaps.values("reason").annotate(calls=Sum("calls")).order_by("reason"):
        of_reason = gaps.filter(reason=row["reason"])
        first = of_reason.order_by("first_at").values_list("first_at", flat=True).first()
        last = of_reason.order_by("-last_at").values_list("last_at", flat=True).first()
        found.append({"reason": row["reason"], "calls": row["calls"], "first_at": _iso(first), "last_at": _iso(last)})
    return found


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None
