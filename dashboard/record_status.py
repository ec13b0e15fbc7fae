"""Whether the record behind a page can be trusted right now: the warnings every dashboard page
shows above its content, and refreshes in place.

An operator reads "why is this pod Pending?" off the record. That answer is wrong, silently,
when the record lags the scheduler (the recorder is behind and the calls wait in the spool; the
database is away; no recorder runs) or lacks calls (dropped, with a reason, as RecordingGap
rows). /readyz and /metrics say all of this, but nobody reads them while looking at a pod.

Owns what is shown and when: the spool as this replica's serving process sees it (each replica
has its own spool and recorder), the recorder's last report (recorder.json), and the drops of
the last hour. Must not judge or write anything, and must not fail a page: whatever it cannot
read, it says it could not. Each page pays for reading the spool's cursor files and one
aggregate query of the gap table.
"""
from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from django.conf import settings

from extproxy.ratelog import RateLimitedLog

# Reasons that are retention's deliberate deletions, not calls the record failed to keep.
PRUNED = ("pruned-age", "pruned-count", "pruned-size")
DROPS_WINDOW = timedelta(hours=1)  # drops this recent are shown on every page
ERROR_SHOWN = 300  # characters of the recorder's last database error (redacted by it already)

_log = RateLimitedLog(logging.getLogger("extproxy.dashboard"), interval=60.0)


@dataclass
class RecordStatus:
    replica: str = field(default_factory=socket.gethostname)  # the pod's name in a Deployment
    unknown: bool = False  # it could not be read (logged): nothing below is known
    recording: bool = True  # recording.enabled in the configuration
    behind_calls: int = 0  # calls answered, spooled and not yet in the database...
    behind_seconds: float = 0.0  # ...the oldest of them this long ago (shown from BEHIND_SECONDS)
    database_failing_since: datetime | None = None  # as the recorder last found the database
    database_error: str = ""
    recorder_silent_seconds: float | None = None  # its last report this long ago (silent or gone)
    recorder_never_reported: bool = False
    drops: list[dict[str, Any]] = field(default_factory=list)  # the last hour's, by reason

    @property
    def behind(self) -> bool:
        return self.behind_calls > 0 and self.behind_seconds >= settings.EXTPROXY_RECORD_BEHIND_SECONDS

    @property
    def trouble(self) -> bool:
        return bool(self.unknown or not self.recording or self.behind or self.database_failing_since
                    or self.recorder_silent_seconds is not None or self.recorder_never_reported or self.drops)


def record_status(now: float | None = None) -> RecordStatus:
    """The record as it stands for this replica, now; `unknown` when it cannot be read."""
    status = RecordStatus()
    try:
        _read(status, time.time() if now is None else now)
    except Exception as exc:  # a page is shown without this, never failed by it
        _log.emit(logging.WARNING, "record-status", "the record's status could not be read: %s: %s",
                  type(exc).__name__, exc)
        return RecordStatus(unknown=True)
    return status


def _read(status: RecordStatus, now: float) -> None:
    from extproxy.engine import get_engine
    from extproxy.recording.observe import RECORDER_SILENT_SECONDS, read_recorder_counters

    recorder = get_engine().recorder
    status.drops = recent_drops(datetime.fromtimestamp(now, timezone.utc) - DROPS_WINDOW)
    if not recorder.keeping:
        status.recording = False
        return
    spool = recorder.status()
    status.behind_calls, status.behind_seconds = spool.depth, spool.oldest_age
    theirs = read_recorder_counters(recorder.spool.root)
    updated_at = _epoch(theirs.get("updated_at"))
    if updated_at is None:
        status.recorder_never_reported = True
        return
    if now - updated_at > RECORDER_SILENT_SECONDS:
        status.recorder_silent_seconds = now - updated_at
        return  # what it last said of the database is too old to tell
    database = theirs.get("database")
    if isinstance(database, dict) and database.get("ok") is False:
        since = _epoch(database.get("failing_since")) or updated_at
        status.database_failing_since = datetime.fromtimestamp(since, timezone.utc)
        status.database_error = str(database.get("error") or "")[:ERROR_SHOWN]


def _epoch(value: Any) -> float | None:
    """A time in recorder.json (epoch seconds), or None for anything else (NaN and infinities
    fail the range too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < 1e11 else None


def recent_drops(since: datetime) -> list[dict[str, Any]]:
    """Calls dropped (not pruned) in gaps that reach past `since`, per reason, with the span
    they cover; [] while the database is away (the page itself then says so)."""
    from django.db.models import Max, Min, Sum

    from extproxy.database_down import OUTAGE
    from extproxy.models import RecordingGap

    try:
        return list(RecordingGap.objects.filter(last_at__gte=since).exclude(reason__in=PRUNED)
                    .values("reason").annotate(calls=Sum("calls"), first=Min("first_at"), last=Max("last_at"))
                    .order_by("reason"))
    except OUTAGE:
        return []


def context(request) -> dict[str, Any]:
    """Context processor for base.html: `record_status` is computed only when a template uses
    it (base.html does for a signed-in viewer; the login page and fragments never do)."""
    return {"record_status": record_status, "record_status_poll": settings.EXTPROXY_RECORD_STATUS_POLL_SECONDS}
