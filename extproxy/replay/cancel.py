"""Cancelling a replay run: asked through the API or the dashboard, honoured by whichever
process carries the run out, between calls and during its wait for the rate.

The request is written to the run's `error` ("cancelled by <who>"), not its status: the runner
saves status and counts from memory as it goes, which would undo a status written meanwhile,
and writes `error` only when the run ends. A queued run is failed at once (the worker passes
over a run no longer queued).
"""
from __future__ import annotations

import time

CANCELLED_BY = "cancelled by "
CHECK_EVERY = 0.5  # seconds between looks at the database while a run goes on


class Cancelled(Exception):
    """The run was cancelled; the message says by whom."""


def request_cancel(run_id: int, who: str) -> bool:
    """Ask for the run to stop; False when it has already ended (or a cancel is under way)."""
    from django.utils import timezone

    from ..models import ReplayRun

    reason = f"{CANCELLED_BY}{who}"[:200]
    runs = ReplayRun.objects.filter(pk=run_id)
    if runs.filter(status="queued").update(status="failed", error=reason, finished_at=timezone.now()):
        return True
    return bool(runs.filter(status="running").exclude(error__startswith=CANCELLED_BY).update(error=reason))


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
            error = ReplayRun.objects.filter(pk=run.pk).values_list("error", flat=True).first() or ""
            if error.startswith(CANCELLED_BY):
                raise Cancelled(error)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, CHECK_EVERY))


def cancel_asked_meanwhile(run) -> str:
    """The cancel asked of `run` since its last look, or "": its final save writes the error from
    memory, which would otherwise erase a cancel the API had already answered and audited."""
    from ..models import ReplayRun

    error = ReplayRun.objects.filter(pk=run.pk).values_list("error", flat=True).first() or ""
    return f"{error} (asked after the last call: the run had finished)" if error.startswith(CANCELLED_BY) else ""
