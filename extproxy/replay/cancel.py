"""Cancelling a replay run: asked through the API or the dashboard, honoured by whichever
process carries the run out, between calls and during its wait for the rate.

The ask is written to the run's own fields (`cancel_requested_by`, `cancel_requested_at`),
which only the ask writes: the runner saves status, counts and its error from memory as it
goes, and none of those saves touches them, so a cancel is never undone by one, and one asked
after the last call stays on the finished run. A queued run is failed at once (the worker
passes over a run no longer queued).

Runs cancelled before these fields existed had the ask in `error` ("cancelled by <who>");
migration 0012 moved those into the fields.
"""
from __future__ import annotations

import time

CANCELLED_BY = "cancelled by "
CHECK_EVERY = 0.5  # seconds between looks at the database while a run goes on
MAX_WHO = 150  # characters of who asked (a username's length)


class Cancelled(Exception):
    """The run was cancelled; the message says by whom."""


def request_cancel(run_id: int, who: str) -> bool:
    """Ask for the run to stop; False when it has already ended (or a cancel is under way)."""
    from django.utils import timezone

    from ..models import ReplayRun

    now = timezone.now()
    asked = {"cancel_requested_by": who[:MAX_WHO], "cancel_requested_at": now}
    runs = ReplayRun.objects.filter(pk=run_id, cancel_requested_at__isnull=True)
    if runs.filter(status="queued").update(status="failed", finished_at=now, **asked):
        return True
    return bool(runs.filter(status="running").update(**asked))


def check_cancelled(run, wait: float = 0.0) -> None:
    """Sleep `wait` seconds, looking for a cancel every CHECK_EVERY; raise Cancelled when the
    run was cancelled. The database is asked at most every CHECK_EVERY seconds, so a fast run
    pays one small query per half second, not one per call."""
    from ..models import ReplayRun

    deadline = time.monotonic() + wait
    while True:
        now = time.monotonic()
        if now - getattr(run, "_cancel_checked_at", 0.0) >= CHECK_EVERY:
            run._cancel_checked_at = now
            asked = ReplayRun.objects.filter(pk=run.pk).values_list("cancel_requested_by", "cancel_requested_at").first()
            if asked and asked[1] is not None:
                run.cancel_requested_by, run.cancel_requested_at = asked
                raise Cancelled(f"{CANCELLED_BY}{asked[0]}")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, CHECK_EVERY))

