"""Gaps in the records: calls the recorder dropped or retention pruned, kept as RecordingGap
rows (reason, count, time range) so an export can say its range is not complete.

Writers: the recorder (drops, by reason) and retention (reason "pruned"). Readers: export
manifests (`gaps_overlapping`). This module must not delete or alter call records.
"""
from __future__ import annotations

from datetime import datetime
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
