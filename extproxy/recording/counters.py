"""The recorder process's counters: what it wrote, dropped and failed, and the database as it
last found it. Mirrored to recorder.json in the spool directory after each batch and each
heartbeat, which is how they reach the serving process's /metrics and /readyz."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any


# An outage the previous recorder reported this recently is taken to go on (kubelet restarts a
# crashing container after at most 5 minutes, and the new one takes a while to start and check);
# an older report says nothing of the time since.
RESUME_WITHIN = 600.0


@dataclass
class Counters:
    """The recorder process's counters, mirrored to recorder.json for the serving /metrics."""

    written: int = 0
    raw: int = 0
    batches: int = 0
    write_errors: int = 0
    nodes_stored_again: int = 0  # BatchWriter.nodes_stored_again
    halved: int = 0  # batches split in two after taking longer than the deadline (halves.py)
    held: dict[str, int] = field(default_factory=dict)  # failed tries of calls kept in the spool, by reason
    over_deadline: int = 0  # calls held now because alone they take longer than the deadline (alarm)
    dropped: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)  # "backend verb outcome" -> count
    # The database as the recorder last found it (a batch written or refused; a check while
    # idle): None until it has tried, then ok, or failing since a time with the last error.
    database_ok: bool | None = None
    database_failing_since: float | None = None
    database_error: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(), "updated_at": time.time(), "written": self.written, "raw": self.raw,
            "batches": self.batches, "write_errors": self.write_errors, "nodes_stored_again": self.nodes_stored_again,
            "halved": self.halved, "held": self.held, "over_deadline": self.over_deadline, "dropped": self.dropped, "calls": self.calls,
            "database": {"ok": self.database_ok, "failing_since": self.database_failing_since,
                         "error": self.database_error},
        }

    def resume_outage(self, previous: dict[str, Any], now: float | None = None) -> None:
        """Take over the outage the previous recorder process reported (its recorder.json), if
        it reported one at most RESUME_WITHIN seconds ago: a recorder restarted, or crash-looping,
        while the database is away would otherwise say the outage began at its own start. The
        next check or batch confirms it (keeping the start) or ends it."""
        database = previous.get("database") or {}  # read_recorder_counters checked its times
        updated_at, since = previous.get("updated_at"), database.get("failing_since")
        now = time.time() if now is None else now
        if database.get("ok") is False and updated_at is not None and since is not None \
                and 0 <= now - updated_at <= RESUME_WITHIN and since <= updated_at:
            self.database_ok, self.database_failing_since = False, float(since)
            self.database_error = str(database.get("error") or "")

    def database_works(self) -> None:
        self.database_ok, self.database_failing_since, self.database_error = True, None, ""

    def database_fails(self, error: str) -> None:
        if self.database_ok is not False:
            self.database_failing_since = time.time()
        self.database_ok, self.database_error = False, error
