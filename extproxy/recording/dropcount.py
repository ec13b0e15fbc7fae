"""The serving process's drops: counted, logged, and written down as gap records in the spool.

Owns `DropCounter`: the totals by reason (`extproxy_recorder_dropped_total`, per process), a
log line at most once a second per reason, and the drops not yet written down. The
spool-writer thread calls `write_gap` each round: at most once every GAP_EVERY seconds (and
always at shutdown) it appends one small gap record (trace.encode_gap: per reason, calls and
the first and last dropped call's start) summarising the drops since the last one; the recorder stores
it as RecordingGap rows (extproxy/gaps.py). Gap records may use the reserve at the top of the
spool's bound that calls may not (SpoolSettings.gap_reserve), and the last one, at shutdown,
may pass the bound. When the spool refuses one anyway (the reserve spent, or a write error),
the counts stay here and go into the next one, so a flood of drops costs one record a
GAP_EVERY and a full spool loses no count, only precision of the range.
What is counted here and not yet in the spool is also kept in the writer directory's tally
(`mirror`, unsettled.py), so that a SIGKILL does not lose the counts: the next writer writes
them down. Must not touch the database (serving process).
"""
from __future__ import annotations

import logging
import threading
import time

from .spool import HEADER
from .spool_writer import SpoolWriter
from .trace import Drops, encode_gap
from .unsettled import Unsettled

log = logging.getLogger(__name__)

GAP_EVERY = 1.0  # seconds between gap records at most: the gaps' time bucket


class DropCounter:
    """Drops by reason, with a log line at most once a second per reason."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.gap_records = 0  # gap records this process appended to the spool
        self._logged: dict[str, float] = {}
        self._pending: dict[str, list] = {}  # reason -> [calls, first, last drop]: not yet in a gap record
        self._lock = threading.Lock()  # add() runs on the event loop and in the spool-writer thread
        self._written = float("-inf")  # monotonic time of the last gap record
        self.mirror: Unsettled | None = None  # set once the spool writer has its directory

    def add(self, reason: str, n: int = 1, first: float | None = None, last: float | None = None) -> None:
        """n calls dropped; first and last: the earliest and latest of their start times (epoch).
        Exports select calls by start, so a gap must cover when its calls started, not when they
        were dropped (a slow call dropped later would fall outside its range). The drop's own
        time only where no call is known."""
        if first is None:
            first = time.time()
        if last is None:
            last = first
        with self._lock:
            self.counts[reason] = self.counts.get(reason, 0) + n
            waiting = self._pending.get(reason)
            if waiting is None:
                self._pending[reason] = [n, first, last]
            else:
                waiting[0] += n
                if first < waiting[1]:
                    waiting[1] = first
                if last > waiting[2]:
                    waiting[2] = last
            if self.mirror is not None:
                self.mirror.drops_pending(self._pending)
        mono = time.monotonic()  # the wall clock may step back; the log's pace must not
        if mono - self._logged.get(reason, 0.0) >= 1.0:
            self._logged[reason] = mono
            log.warning("recorder: call not recorded (%s); %d dropped for this reason so far", reason, self.counts[reason])

    def attach(self, mirror: Unsettled | None) -> None:
        """Keep the drops not yet written down in `mirror` too, from now on (None: no more)."""
        with self._lock:
            self.mirror = mirror
            if mirror is not None:
                mirror.drops_pending(self._pending)

    @property
    def pending(self) -> int:
        """Drops counted and not yet written down in the spool."""
        with self._lock:
            return sum(w[0] for w in self._pending.values())

    def _take(self, seq: int) -> list[Drops]:
        """The drops waiting, to go into the gap record numbered `seq`."""
        with self._lock:
            taken, self._pending = self._pending, {}
            drops = [Drops(reason, calls, first, last) for reason, (calls, first, last) in taken.items()]
            if self.mirror is not None:  # in this order: a kill in between counts them twice, never not at all
                self.mirror.gap_writing(drops, seq)
                self.mirror.drops_pending(self._pending)
        return drops

    def _put_back(self, taken: list[Drops]) -> None:
        with self._lock:
            for drops in taken:
                newer = self._pending.get(drops.reason)
                if newer is None:
                    self._pending[drops.reason] = [drops.calls, drops.first_at, drops.last_at]
                else:  # start times: the older record's need not all be earlier
                    newer[0] += drops.calls
                    newer[1] = min(newer[1], drops.first_at)
                    newer[2] = max(newer[2], drops.last_at)
            if self.mirror is not None:
                self.mirror.drops_pending(self._pending)

    def write_gap(self, writer: SpoolWriter, now_please: bool = False) -> bool:
        """Append the drops since the last gap record to the spool, if any and if GAP_EVERY has
        passed (or now_please: shutdown). False when drops are still waiting."""
        if not self._pending or (not now_please and time.monotonic() - self._written < GAP_EVERY):
            return not self._pending
        taken = self._take(writer.seq + 1)
        try:
            record = encode_gap(taken)
            # Up to the whole bound (the calls' stops short of it: SpoolSettings.gap_reserve), and
            # at shutdown past it by this one record: the counts would otherwise die with the process.
            bound = writer.settings.max_bytes + (HEADER.size + len(record) if now_please else 0)
            accepted = writer.append([record], bound)[0]
        except Exception as exc:  # the disk refuses (or a bug): the counts are kept and retried next time
            log.error("recorder: writing down %d drops failed: %s: %s", sum(d.calls for d in taken),
                      type(exc).__name__, exc)
            accepted = bool(getattr(exc, "accepted", [False])[0])  # unless it reached the file whole
        if not accepted:
            self._put_back(taken)
            if self.mirror is not None:
                self.mirror.gap_written()
            if now_please:
                log.error("recorder: %d dropped calls not written down as a gap (the spool refused it)",
                          sum(d.calls for d in taken))
            return False
        if self.mirror is not None:
            self.mirror.gap_written()
        self._written = time.monotonic()
        self.gap_records += 1
        return True
