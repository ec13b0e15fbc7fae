"""Reading a replay's selection without holding a read open while its calls are stored."""
from __future__ import annotations

from typing import Iterator

from django.db.models import Max, Q


def in_pages(queryset, limit: int, page: int = 100) -> Iterator:
    """The selection (ordered by start, then id), read a page at a time, each read closed before
    its calls are replayed and stored: SQLite failed a store at once ("database is locked") when
    a read left open across it had begun before another connection's commit (the recorder's,
    the run's heartbeat). The selection is the one that stood at the first read (ids up to the
    highest then): a call recorded meanwhile is not added, or a run under steady traffic would
    not reach its end (nor its total)."""
    ceiling = queryset.order_by().aggregate(top=Max("pk"))["top"]
    if ceiling is None:
        return
    queryset = queryset.filter(pk__lte=ceiling)
    taken, last = 0, None
    while taken < limit:
        rest = queryset if last is None else queryset.filter(
            Q(started_at__gt=last.started_at) | Q(started_at=last.started_at, pk__gt=last.pk))
        batch = list(rest[:min(page, limit - taken)])
        yield from batch
        if len(batch) < page:
            return
        taken, last = taken + len(batch), batch[-1]
