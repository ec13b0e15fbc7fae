"""Whether the record behind a page can be trusted right now: the warnings every dashboard page
shows above its content, and refreshes in place.

An operator reads "why is this pod Pending?" off the record. That answer is wrong, silently,
when the record lags the scheduler (the recorder is behind and the calls wait in the spool; the
database is away; no recorder runs) or lacks calls (dropped, with a reason, as RecordingGap
rows). /readyz and /metrics say all of this, but nobody reads them while looking at a pod.

Owns what is shown and when, from what /readyz reports for this replica (observe.readiness:
its spool and its recorder's last report; each replica has its own) and the drops of the
last hour. Must not judge or write anything, and must not fail a page: whatever it cannot
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
    """From what /readyz reports (observe.readiness), and the gap table."""
    from extproxy.engine import get_engine
    from extproxy.recording.observe import RECORDER_SILENT_SECONDS, readiness

    recorder = get_engine().recorder
    status.drops = recent_drops(datetime.fromtimestamp(now, timezone.utc) - DROPS_WINDOW)
    if not recorder.keeping:
        status.recording = False
        return
    ready = readiness(recorder)
    status.behind_calls, status.behind_seconds = ready["spool_depth"], ready["oldest_undrained_age_seconds"]
    silent = ready["recorder_heartbeat_age_seconds"]
    if silent is None:
        status.recorder_never_reported = True
    elif silent > RECORDER_SILENT_SECONDS:
        status.recorder_silent_seconds = silent  # what it last said of the database is too old to tell
    elif ready["database"]["ok"] is False:
        since = ready["database"].get("failing_since") or now - silent  # else: since its report
        status.database_failing_since = datetime.fromtimestamp(since, timezone.utc)
        status.database_error = str(ready["database"].get("error") or "")[:ERROR_SHOWN]


def recent_drops(since: datetime) -> list[dict[str, Any]]:
    """Calls dropped (not pruned, and no audit events: gaps.of_kind) in gaps that reach past
    `since`, per reason, with the span they cover; [] while the database is away (the page
    itself then says so)."""
    from django.db.models import Max, Min, Sum

    from extproxy.database_down import OUTAGE
    from extproxy.gaps import of_kind
    from extproxy.models import RecordingGap

    try:
        return list(RecordingGap.objects.filter(of_kind("calls"), last_at__gte=since).exclude(reason__in=PRUNED)
                    .values("reason").annotate(calls=Sum("calls"), first=Min("first_at"), last=Max("last_at"))
                    .order_by("reason"))
    except OUTAGE:
        return []


def context(request) -> dict[str, Any]:
    """Context processor for base.html: `record_status` is computed only when a template uses
    it (base.html does for a signed-in viewer; the login page and fragments never do)."""
    return {"record_status": record_status, "record_status_poll": settings.EXTPROXY_RECORD_STATUS_POLL_SECONDS}
