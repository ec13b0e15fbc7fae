"""Reading a replay's selection without holding a read open while its calls are stored."""
from __future__ import annotations

from typing import Iterator

from django.db.models import Max, Q


def as_it_stands(queryset):
    """The selection as it stands now: ids up to the highest now. A call recorded later is not
    added, or a run under steady traffic would not reach its end (nor its total). A run counts
    its total and reads its calls from this one queryset: a total counted apart from the bound
    missed a call recorded between the count and the first read, which was then replayed
    (done one more than total)."""
    ceiling = queryset.order_by().aggregate(top=Max("pk"))["top"]
    return queryset.none() if ceiling is None else queryset.filter(pk__lte=ceiling)


def in_pages(queryset, limit: int, page: int = 100) -> Iterator:
    """The selection (ordered by start, then id), read a page at a time, each read closed before
    its calls are replayed and stored: SQLite failed a store at once ("database is locked") when
    a read left open across it had begun before another connection's commit (the recorder's,
    the run's heartbeat). Give it the selection bounded by `as_it_stands`."""
    taken, last = 0, None
    while taken < limit:
        rest = queryset if last is None else queryset.filter(
            Q(started_at__gt=last.started_at) | Q(started_at=last.started_at, pk__gt=last.pk))
        batch = list(rest[:min(page, limit - taken)])
        yield from batch
        if len(batch) < page:
            return
        taken, last = taken + len(batch), batch[-1]
