"""Whether the record behind a page can be trusted right now: the warnings every dashboard page
shows above its content, and refreshes in place.

An operator reads "why is this pod Pending?" off the record. That answer is wrong, silently,
when the record lags the scheduler (the recorder is behind and the calls wait in the spool; the
database is away; no recorder runs) or lacks calls (dropped, with a reason, as RecordingGap
rows). /readyz and /metrics say all of this, but nobody reads them while looking at a pod.

Owns what is shown and when: the spool as this replica's serving process sees it (each replica
has its own spool and recorder), the recorder's last report (recorder.json), and the drops of
the last hour. Must not judge or write anything. Everything here is read from the spool's
files and one query of the gap table, so a page pays little for it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from django.conf import settings

# Reasons that are retention's deliberate deletions, not calls the record failed to keep.
PRUNED = ("pruned-age", "pruned-count", "pruned-size")
DROPS_WINDOW = timedelta(hours=1)  # drops this recent are shown on every page
ERROR_SHOWN = 300  # characters of the recorder's last database error (redacted by it already)


@dataclass
class RecordStatus:
    recording: bool = True  # recording.enabled in the configuration
    config_error: str = ""  # the configuration cannot be loaded: nothing else is known
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
        return bool(not self.recording or self.config_error or self.behind or self.database_failing_since
                    or self.recorder_silent_seconds is not None or self.recorder_never_reported or self.drops)


def record_status(now: float | None = None) -> RecordStatus:
    """The record as it stands for this replica, now."""
    from extproxy.engine import get_engine
    from extproxy.recording.observe import RECORDER_SILENT_SECONDS, read_recorder_counters

    now = time.time() if now is None else now
    status = RecordStatus()
    try:
        recorder = get_engine().recorder
    except Exception as exc:  # the pages that need the configuration say more
        status.config_error = str(exc)[:ERROR_SHOWN]
        return status
    status.drops = recent_drops(datetime.fromtimestamp(now, timezone.utc) - DROPS_WINDOW)
    if not recorder.keeping:
        status.recording = False
        return status
    spool = recorder.status()
    status.behind_calls, status.behind_seconds = spool.depth, spool.oldest_age
    theirs = read_recorder_counters(recorder.spool.root)
    if "updated_at" not in theirs:
        status.recorder_never_reported = True
        return status
    silent = now - theirs["updated_at"]
    if silent > RECORDER_SILENT_SECONDS:
        status.recorder_silent_seconds = silent
        return status  # what it last said of the database is too old to tell
    database = theirs.get("database") or {}
    if database.get("ok") is False:
        since = database.get("failing_since")
        status.database_failing_since = datetime.fromtimestamp(since or theirs["updated_at"], timezone.utc)
        status.database_error = str(database.get("error") or "")[:ERROR_SHOWN]
    return status


def recent_drops(since: datetime) -> list[dict[str, Any]]:
    """Calls dropped (not pruned) in gaps that reach past `since`, per reason; [] when the gap
    table cannot be read (the page itself then says the database is away)."""
    from django.db import DatabaseError

    from extproxy.gaps import gaps_overlapping

    try:
        found = [g for g in gaps_overlapping(since, None) if g["reason"] not in PRUNED]
    except DatabaseError:
        return []
    for g in found:  # datetimes for the templates' date filter; the ISO text stays for links
        g["first"], g["last"] = (datetime.fromisoformat(g[k].replace("Z", "+00:00")) for k in ("first_at", "last_at"))
    return found


def context(request) -> dict[str, Any]:
    """Context processor for base.html: `record_status` is computed only when a template uses
    it (base.html does for a signed-in viewer; the login page and fragments never do)."""
    return {"record_status": record_status, "record_status_poll": settings.EXTPROXY_RECORD_STATUS_POLL_SECONDS}
