"""Reading in pages: a replay's selection, without holding a read open while its calls are
stored; a run's items by kind of change, through its kind index (models.ReplayItemKind), with
totals that agree with what is listed, also while the run goes on."""
from __future__ import annotations

from typing import Iterable, Iterator

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


MAX_KIND = 100  # characters of a kind in the index (models.ReplayItemKind.kind); kinds are short words
# The calls a run could not replay, entered in the kind index under a name no kind of change has
# (diff.py's are words, "outcome:..." and "part:..."): among 100,000 calls the run's handful of
# errors could only be found by paging through all of them.
NOT_REPLAYED = "(not replayed)"


def index_kinds(items: Iterable, not_replayed: bool = False) -> None:
    """Enter stored items' kinds of change in the run's kind index (models.ReplayItemKind), in
    the transaction that stores them (storing.store): an item without its entries is not listed
    under its kinds. `not_replayed`: the items are calls that could not be replayed."""
    from ..models import ReplayItemKind

    ReplayItemKind.objects.bulk_create([ReplayItemKind(run_id=item.run_id, item_id=item.pk, kind=str(kind)[:MAX_KIND])
                                        for item in items
                                        for kind in list(item.kinds or ()) + ([NOT_REPLAYED] if not_replayed else [])])


def ids_of_kind(run_id: int, kind: str, offset: int, limit: int) -> list[int]:
    """The ids of one page of a run's items whose diff has `kind` (oldest first), from the
    run's kind index: the entries of that kind up to the page, none of the run's items (the
    kinds list of every item was read for one page: 0.3 s on SQLite, 0.7 s on PostgreSQL with
    100,000 items). The caller reads those items whole. The run page and the API page alike."""
    from ..models import ReplayItemKind

    if limit <= 0:
        return []
    entries = ReplayItemKind.objects.filter(run_id=run_id, kind=kind).order_by("item_id")
    return list(entries.values_list("item_id", flat=True)[offset : offset + limit])


def listing_total(run, kind: str = "", changed: bool = False) -> int:
    """How many of the run's items a listing holds: all, the changed ones, or those of `kind`.
    While the run goes on, its figures as read with it (written with its items: storing.py),
    and a page lists no more than they count (listed_up_to), so the page and its totals agree
    at every moment; they were saved every half second, and a page listed more calls of a kind
    than its total. Once the run has ended, counted from its items (a run stored before its
    figures were written with its items may count a few less)."""
    from ..models import ReplayItemKind

    if run.status in ("queued", "running"):
        if kind == NOT_REPLAYED:
            return run.errors
        return run.counts.get(kind, 0) if kind else run.changed if changed else run.done
    if kind:
        return ReplayItemKind.objects.filter(run_id=run.pk, kind=kind).count()
    return (run.items.filter(changed=True) if changed else run.items.all()).count()


def listed_up_to(total: int, offset: int, page: int) -> int:
    """How many items a page from `offset` lists when `total` were counted: a running run's
    items stored after its figures were read are left to the next look."""
    return max(0, min(page, total - offset))
