"""Calls counted per backend, verb, minute and latency bucket (`LatencyCell`), so that the
backends page and the feed's summary band aggregate a few thousand rows in SQL whatever the
size of the call table.

Latency buckets are logarithmic, four per decade from 0.1 ms (each one 1.78× the previous),
so percentiles read from them are within that factor and a heatmap needs no other data.

Two sources are counted, each after its own mark: the call table (what the scheduler called:
a backend of the per-backend form, or `combined`) and the combined form's backend parts, under
each backend's own name, so that in the combined form the backends page and the summary band
speak for every configured backend and not only for the entry.

The roll-up reads each table by id, after a mark kept in `RollupMark`, in one transaction
that holds the mark's row: several processes may run it, each call is counted once. Ids of a
batch another process has not committed yet look like a gap; the roll-up stops before a gap
for up to `GAP_WAIT`, then counts past it (a rolled-back batch, or rows retention deleted).
A daemon thread of the recorder process (`manage.py recorder`) runs it every second, each
pass bounded by EXTPROXY_DB_STATEMENT_DEADLINE (a failed pass is counted, logged, retried, and
reported with the time of the last pass completed, rollup_health.py); pages
also run a bounded pass first, so they are current without the thread. This module must not write call records.
"""
from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from extproxy.ratelog import RateLimitedLog

log = logging.getLogger(__name__)
_ratelog = RateLimitedLog(log)

BUCKETS_PER_DECADE = 4
FIRST_EDGE_MS = 0.1
BUCKETS = 28  # the last one is open-ended (over 10^6.75 × 0.1 ms ≈ 9.4 minutes)
UPPER_EDGES_MS = [FIRST_EDGE_MS * 10 ** ((i + 1) / BUCKETS_PER_DECADE) for i in range(BUCKETS)]
GAP_WAIT = timedelta(seconds=10)
PASS_ROWS = 20_000
MARK = "calls"
PARTS_MARK = "backend-calls"  # the combined form's backend parts (extproxy.models.BackendCall)

_thread: threading.Thread | None = None
failed_passes = 0  # passes of the thread that failed (logged with the count), since the process started
_stop = threading.Event()


def bucket_of(ms: float) -> int:
    if ms <= FIRST_EDGE_MS * 10 ** (1 / BUCKETS_PER_DECADE):
        return 0
    return min(BUCKETS - 1, math.ceil(BUCKETS_PER_DECADE * math.log10(ms / FIRST_EDGE_MS) - 1e-9) - 1)


def bucket_bounds(index: int) -> tuple[float, float]:
    low = 0.0 if index == 0 else UPPER_EDGES_MS[index - 1]
    return low, UPPER_EDGES_MS[index]


def epoch_minute(when: datetime) -> int:
    return int(when.timestamp() // 60)


def minute_start(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, tz=timezone.utc)


def catch_up(max_rows: int = PASS_ROWS, now: datetime | None = None) -> int:
    """Count the calls and backend parts recorded since the last pass (at most `max_rows` of
    each); returns how many were counted in all."""
    from extproxy.models import BackendCall, Call

    now = now or datetime.now(timezone.utc)
    calls = Call.objects.values_list("id", "backend", "verb", "started_at", "finished_at", "outcome", "is_replay")
    parts = BackendCall.objects.values_list("id", "backend", "verb", "started_at", "finished_at", "outcome",
                                            "call__is_replay")
    return _catch_up_source(MARK, calls, max_rows, now) + _catch_up_source(PARTS_MARK, parts, max_rows, now)


def _catch_up_source(name: str, rows_of: Any, max_rows: int, now: datetime) -> int:
    """One source's pass: its rows after its mark, up to the first gap that may still fill."""
    from django.db import transaction

    from .models import LatencyCell, RollupMark

    with transaction.atomic():
        mark, _ = RollupMark.objects.select_for_update().get_or_create(name=name)
        rows = list(rows_of.filter(id__gt=mark.last_id).order_by("id")[:max_rows])
        counted, waiting = _until_gap(mark, rows, now)
        if not counted:
            if waiting and mark.gap_since is None:
                mark.gap_since = now
                mark.save(update_fields=["gap_since"])
            return 0
        cells: dict[tuple[str, str, int, int], list] = defaultdict(lambda: [0, 0, 0, 0.0])
        for _, backend, verb, started, finished, outcome, is_replay in counted:
            if is_replay:  # replays (extproxy/replay) are not the scheduler's traffic
                continue
            ms = (finished - started).total_seconds() * 1000
            cell = cells[(backend, verb, epoch_minute(started), bucket_of(ms))]
            cell[0] += 1
            cell[1] += outcome == "error"
            cell[2] += outcome == "timeout"
            cell[3] = max(cell[3], ms)
        if cells:
            _add(LatencyCell, cells)
        mark.last_id = counted[-1][0]
        mark.gap_since = now if waiting else None
        mark.save(update_fields=["last_id", "gap_since"])
    return len(counted)


def _until_gap(mark: Any, rows: list[tuple], now: datetime) -> tuple[list[tuple], bool]:
    """The rows before the first gap in ids that may still fill, and whether one was found.

    A gap right after the mark is counted past once it has been waited for (or on the very
    first pass); any other gap stops the pass there.
    """
    expected = mark.last_id + 1
    past_first = mark.last_id == 0 or (mark.gap_since is not None and now - mark.gap_since >= GAP_WAIT)
    for index, row in enumerate(rows):
        if row[0] != expected and not (index == 0 and past_first):
            return rows[:index], True
        expected = row[0] + 1
    return rows, False


def _add(model: Any, cells: dict[tuple[str, str, int, int], list]) -> None:
    """Add the counts to the stored cells (the caller holds the mark, so no one else writes)."""
    minutes = [key[2] for key in cells]
    existing: dict[tuple, Any] = {
        (cell.backend, cell.verb, cell.minute, cell.bucket): cell
        for cell in model.objects.filter(minute__gte=min(minutes), minute__lte=max(minutes)).iterator(chunk_size=2000)
        if (cell.backend, cell.verb, cell.minute, cell.bucket) in cells
    }
    fresh, changed = [], []
    for key, (calls, errors, timeouts, slowest) in cells.items():
        cell = existing.get(key)
        if cell is None:
            fresh.append(model(backend=key[0], verb=key[1], minute=key[2], bucket=key[3], calls=calls,
                               errors=errors, timeouts=timeouts, slowest_ms=slowest))
        else:
            cell.calls += calls
            cell.errors += errors
            cell.timeouts += timeouts
            cell.slowest_ms = max(cell.slowest_ms, slowest)
            changed.append(cell)
    model.objects.bulk_create(fresh, batch_size=500)
    model.objects.bulk_update(changed, ["calls", "errors", "timeouts", "slowest_ms"], batch_size=500)


def prune(keep: timedelta = timedelta(days=8)) -> int:
    from .models import LatencyCell

    deleted, _ = LatencyCell.objects.filter(minute__lt=epoch_minute(datetime.now(timezone.utc) - keep)).delete()
    return deleted


def _bounded(work: Callable[[], int]) -> int:
    """`work` on this thread's connection, given up past EXTPROXY_DB_STATEMENT_DEADLINE or when
    the thread is stopped: a database that takes every byte and never answers held the roll-up
    for ever (the backends page then showed old latencies), and the recorder's stop with it."""
    from django.conf import settings
    from django.db import connections

    from extproxy.recording.deadline import Deadline

    with Deadline(settings.EXTPROXY_DB_STATEMENT_DEADLINE, connections["default"], _stop, "latency roll-up"):
        return work()


def _run() -> None:
    import time

    from django.db import DatabaseError, close_old_connections, connections

    from extproxy.recording.deadline import Abandoned, DeadlinePassed, close_quietly

    global failed_passes
    next_prune = 0.0
    started_at, last_pass_at = time.time(), None
    while not _stop.is_set():
        try:
            while _bounded(catch_up) >= PASS_ROWS and not _stop.is_set():  # a source was cut at PASS_ROWS
                pass  # behind: go on without waiting
            last_pass_at = time.time()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + 3600
                _bounded(prune)
        except Abandoned:  # stopping
            close_quietly(connections["default"])
            return
        except DeadlinePassed as exc:  # at most one a deadline: each is logged
            failed_passes += 1
            log.error("latency roll-up failed (%d passes so far; retried on a new connection): %s", failed_passes, exc)
            close_quietly(connections["default"])
        except DatabaseError as exc:  # the database is away: a line a minute, try again on the next tick
            failed_passes += 1
            _ratelog.emit(logging.WARNING, "database", "latency roll-up failed, database unavailable (%d passes so "
                          "far; retried every second): %s", failed_passes, str(exc).strip())
            close_old_connections()
        except Exception:  # a bug: its traceback, and the roll-up goes on
            failed_passes += 1
            log.exception("latency roll-up failed; retrying")
            close_old_connections()
        _report(started_at, last_pass_at)
        _stop.wait(1.0)


def _report(started_at: float, last_pass_at: float | None) -> None:
    """For the serving process's /metrics and backends page (rollup_health.py)."""
    from pathlib import Path

    from django.conf import settings

    from .rollup_health import save

    try:
        save(Path(settings.EXTPROXY_SPOOL_DIR), started_at, failed_passes, last_pass_at)
    except OSError as exc:  # the roll-up goes on; only its report is missing
        _ratelog.emit(logging.WARNING, "report", "latency roll-up: figures not saved: %s", exc)


def start() -> None:
    global _thread
    if _thread is None:
        _stop.clear()
        _thread = threading.Thread(target=_run, name="extproxy-rollup", daemon=True)
        _thread.start()


def stop() -> None:
    global _thread
    _stop.set()
    if _thread is not None:
        _thread.join(5)
        _thread = None
