"""Each replica's recorder says in the database up to when its replica's calls are stored.

A replica's spool and its calls in flight are seen only on its own disk (an emptyDir per pod in
deploy/). An export served by one replica of two, or `manage.py export` run in a pod of its own,
saw only its own spool: while the other replica's recorder was behind or stopped, or a call was
still in flight there, the manifest said `complete: true` for a range that later held more calls.

So the recorder writes its spool's limits (stored_up_to.spool_limits) into its `SpoolReport` row after
each stored batch (at most every REPORT_EVERY seconds) and every heartbeat while idle, and
`stored_up_to.still_open` takes every other replica's row as a limit too. A report is a lower bound
however old: what was stored stays stored, so a replica whose recorder went silent (stopped,
or cut off from the database) holds every later range open, and the manifest says since when
it has not reported. A recorder that stops with its spool empty and no serving process left
marks its row ended: nothing of that replica's can still arrive. A replica that vanished
otherwise (a pod deleted with calls in its spool) holds ranges open until an operator
forgets it (`manage.py forget_replica`), which the audit trail records: the span its calls may
be missing from becomes a gap (`replica-forgotten`), counting those its spool held at its last
report (those it answered since are not known).

Left out: a replica that answered calls before its recorder's first report (a recorder that
cannot reach the database at its start) is not seen by other replicas' exports until then.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from django.utils import timezone

from .ratelog import RateLimitedLog
from .stored_up_to import Limit, replica_key, settle_seconds, spool_limits

log = logging.getLogger(__name__)
failures = RateLimitedLog(log, interval=60.0)  # a database away fails every report: one line a minute

REPORT_EVERY = 1.0  # seconds between two reports at most while batches are stored
FINAL_DEADLINE = 5.0  # seconds the last report may wait for the database (the stop window is over)


class SpoolReporter:
    """The recorder's reports of its own spool (module docstring). Database errors are logged and
    let pass: the report is tried again at the recorder's next idle flush."""

    def __init__(self, root: Path, deadline: float, stop: threading.Event | None = None) -> None:
        self.root = Path(root)
        self.replica = replica_key(self.root)
        self.deadline = deadline
        # Read once: the configuration parsed at every report (each second while batches are
        # stored) was the same file the serving process read at its start, and a change to it
        # bounds calls only once the serving process restarts (stored_up_to.settle_seconds).
        self._bound: float | None = None
        self.stop = stop
        self._last = 0.0
        self._pending = False  # a report asked for and held back by REPORT_EVERY

    def report(self, force: bool = False) -> None:
        """Write the row, or once REPORT_EVERY seconds have passed since the last (`flush`); `force`: now."""
        self._pending = True
        self.flush(force)

    def flush(self, force: bool = False) -> None:
        """Write a report held back by REPORT_EVERY once that has passed (the recorder's idle loop
        asks): dropped instead, the row kept the state before the batch until the next heartbeat."""
        if not self._pending or (not force and time.monotonic() - self._last < REPORT_EVERY):
            return
        self._pending = False
        self._last = time.monotonic()
        self._write(self.deadline, self.stop, final=False)

    def final(self) -> None:
        """The last report, as the recorder stops: ended when nothing of this replica's can still
        arrive. Not bound to the stop event, which is set by now."""
        self._write(FINAL_DEADLINE, None, final=True)

    def _write(self, deadline: float, stop: threading.Event | None, final: bool) -> None:
        from django.db import connections

        from .models import SpoolReport
        from .recording.deadline import Deadline, close_quietly

        now = timezone.now()
        try:
            if self._bound is None:
                self._bound = settle_seconds()
            limits, undrained = spool_limits(self.root, self._bound, now)
        except Exception as exc:  # the configuration or the spool could not be read: not known
            limits, undrained = [Limit(None, f"the recorder could not read its spool or configuration "
                                             f"({type(exc).__name__})")], 0
        points = [limit.point for limit in limits]
        fields = {
            "reported_at": now,
            "stored_up_to": None if None in points else min([now, *points]),
            "reason": "; ".join(limit.reason for limit in limits),
            "undrained": undrained,
            "ended": final and not limits,
        }
        database = connections["default"]
        try:
            with Deadline(deadline, database, stop, label="spool report"):
                SpoolReport.objects.update_or_create(replica=self.replica, defaults=fields)
        except Exception as exc:  # the database is away or busy: tried again at the next flush
            self._pending = True
            failures.emit(logging.WARNING, "report", "recorder: spool report not written (tried again): %s",
                          f"{type(exc).__name__}: {exc}"[:300])
            close_quietly(database)


FORGOTTEN = "replica-forgotten"  # the gap reason of a forgotten replica's unstored calls


def forget(replica: str) -> dict | None:
    """Drop a gone replica's report and write what may be lost with it as a gap: from its
    stored-up-to point (its report's time when that was not known) to now, counting the calls
    its spool held at its last report. That count is a lower bound: calls it answered after its
    last report are not known. Exports overlapping the span so say what is missing instead of
    calling it complete. An ended replica leaves no gap. Returns what it had last reported, or
    None when there was no report."""
    from django.db import transaction

    from .models import RecordingGap, SpoolReport

    with transaction.atomic():
        report = SpoolReport.objects.select_for_update().filter(replica=replica).first()
        if report is None:
            return None
        if not report.ended:  # RecordingGap directly: note_gap leaves out a count of 0, which is not "nothing lost"
            now = timezone.now()
            RecordingGap.objects.create(reason=FORGOTTEN, calls=report.undrained, noted_at=now, last_at=now,
                                        first_at=report.stored_up_to or report.reported_at)
        report.delete()
    return {"reported_at": report.reported_at.isoformat(), "ended": report.ended, "undrained": report.undrained,
            "stored_up_to": report.stored_up_to.isoformat() if report.stored_up_to else None, "reason": report.reason}
