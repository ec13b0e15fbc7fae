"""The recorder process's loop: drain the spool into the database in batches.

Owns reading a batch from the spool, turning each record into rows (rows.py; a raw record when
that fails), storing the batch in one transaction (`BatchWriter`, batchwriter.py), marking it
committed in the spool, then publishing live summaries (live.py) and, every PRUNE_EVERY, retention.
A batch that fails to store (database down, locked) is kept and retried with backoff; the
spool keeps filling meanwhile, so an outage loses nothing up to the spool's bound; one too large
for the deadline is stored in halves (halves.py). A record already in the database (a batch
re-read after a restart) is skipped by its unique call_id. Must not run in the serving process.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from ..config import RecordingConfig, RedactionConfig, RetentionConfig
from ..gaps import Drop, note_drops
from ..redaction import bounded_text
from .apart import StoreApart, is_refusal
from .batchwriter import BatchWriter
from .retention import PRUNE_EVERY, prune
from .rows import Built
from .counters import Counters
from .deadline import Abandoned, Deadline, close_quietly, each_statement
from .halves import OVER_DEADLINE, Piece, answers, note_over_deadline, on_the_deadline
from .observe import read_recorder_counters, write_recorder_counters
from .spool_reader import ReadResult, SpoolReader
from .trace import Trace, UnreadableRecord, decode_record, record_size

log = logging.getLogger(__name__)

HEARTBEAT = 5.0  # seconds between counter saves while idle (the serving side reads their age)
# Characters kept of the last database error in the counters (shown on /readyz): a driver's
# message can quote the rows it refused, so it is redacted and cut like a call's error.
DATABASE_ERROR_TEXT = 1024
BATCH_BYTES = 64 << 20  # decoded payload bytes read per batch at most (besides recording.batchSize)


class Drainer:
    """Spool -> database, batch after batch, until stopped."""

    def __init__(
        self,
        root: Path,
        recording: RecordingConfig,
        redaction: RedactionConfig,
        retention: RetentionConfig | None = None,
        publisher=None,
        stop: threading.Event | None = None,
        recycle: int | None = None,
    ) -> None:
        from django.conf import settings

        self.root = Path(root)
        self.recording = recording
        # Finished segments kept for the serving process to overwrite (EXTPROXY_SPOOL_RECYCLE_SEGMENTS).
        self.reader = SpoolReader(self.root, settings.EXTPROXY_SPOOL_RECYCLE_SEGMENTS if recycle is None else recycle,
                                  sync=settings.EXTPROXY_SPOOL_FSYNC != "never",
                                  zero_after=settings.EXTPROXY_SPOOL_SEGMENT_SECONDS)
        self.writer = BatchWriter(redaction)
        self.writer.deadline = settings.EXTPROXY_DB_STATEMENT_DEADLINE
        self.retention = retention
        self.publisher = publisher
        self.stop = stop or threading.Event()
        self.writer.stop = self.stop
        self.counters = Counters()
        self.counters.resume_outage(read_recorder_counters(self.root))
        self._next_prune = 0.0
        self._saved = 0.0
        self.until_idle = False
        # Reports this spool's stored-up-to point for other replicas' exports (spool_reports.py);
        # set by the recorder command, None where a Drainer only drains (tests, tools).
        self.reporter: Any = None

    def run(self, until_idle: bool = False) -> None:
        """Drain until stopped (or, with until_idle, until the spool has nothing to read).

        `until_idle` may also be switched on while running (a SIGTERM handler does).
        """
        self.until_idle = self.until_idle or until_idle
        self._check_database()
        self._save_counters()
        self._report(force=True)
        while not self.stop.is_set():
            self._maybe_prune()
            if self.drain_batch() == 0:
                if self.until_idle:
                    return
                if self.reporter is not None:
                    self.reporter.flush()
                if time.monotonic() - self._saved >= HEARTBEAT:
                    self._check_database()
                    self._save_counters()
                    self._report(force=True)
                self.stop.wait(self.recording.flush_interval)

    def drain_batch(self) -> int:
        """One batch: read, build, store (retrying), count, commit, publish. Returns records read.

        Gap records and the drops seen here (torn tails, unreadable records) are stored as
        RecordingGap rows in the batch's transaction."""
        result = self.reader.read(self.recording.batch_size, BATCH_BYTES, record_size)
        if result.torn:
            self._drop("torn", result.torn)
        if not result.entries and not result.torn:
            if self.reader.moved:
                # On to a new segment only (its writer finished the last one by age, or at its
                # stop): that one is stored whole, and is retired now rather than at the next record.
                self.reader.commit()
            self.reader.zero_free()  # free files come due while nothing is read too
            return 0
        traces, gaps = self._decode(result)
        raw_before = self.writer.raw
        built, new_nodes, used = self.writer.build(traces)
        summaries, whole = self._store(traces, built, new_nodes, used, gaps)
        if not whole:  # stopped while the database was down: the rest stays in the spool
            if summaries:  # halves stored meanwhile: read again, they are found stored, counted now
                self._count(summaries, self.writer.raw - raw_before)
                self._publish(summaries)
            self.reader.rewind()
            return 0
        self.counters.nodes_stored_again = self.writer.nodes_stored_again  # saved with the counts below
        # Counters are saved before the cursor moves, so whoever sees the spool empty also sees
        # the written count that emptied it. If the process dies between the two, the next one
        # reads the batch again and counts (written, raw) only what it newly stores.
        if result.entries:
            self._count(summaries, self.writer.raw - raw_before)
        else:
            self._save_counters()
        self.reader.commit()
        self._report()
        self._publish(summaries)
        return len(result.entries)

    def _decode(self, result: ReadResult) -> tuple[list[Trace], list[Drop]]:
        """The batch's calls, and its drops: gap records', unreadable records', torn tails'.
        Each drop is keyed by its place in the spool (gaps.drop_key), so reading the batch
        again stores none of them twice."""
        traces: list[Trace] = []
        gaps: list[Drop] = []
        unreadable = 0
        for entry in result.entries:
            where = f"{entry.writer}/{entry.seq}"
            try:
                record = decode_record(entry.payload)
            except UnreadableRecord as exc:
                log.error("recorder: spool record %s unreadable: %s", where, exc)
                unreadable += 1
                gaps.append(Drop("unreadable", 1, entry.at, entry.at, where))
                continue
            if isinstance(record, Trace):
                traces.append(record)
            else:
                gaps.extend(Drop(d.reason, d.calls, d.first_at, d.last_at, where) for d in record)
        if unreadable:
            self._drop("unreadable", unreadable)
        # at least one call each (a corrupt frame mid-segment: the records up to the next intact one)
        gaps.extend(Drop("torn", tail.records, tail.at, tail.at, f"torn {tail.where}") for tail in result.torn_tails)
        return traces, gaps

    def _store(self, traces: list[Trace], built: list[Built], new_nodes: list, used: set[str],
               gaps: list[Drop]) -> tuple[list[dict[str, Any]], bool]:
        """The batch stored, whole or in halves (halves.py). Returns the summaries of the calls
        stored, and whether all of it was (not when stopped meanwhile: the rest stays in the spool)."""
        pieces = [Piece(traces, built, new_nodes, used, gaps)]
        summaries: list[dict[str, Any]] = []
        while pieces:
            stored = self._store_piece(pieces[0])
            if stored is None:
                return summaries, False
            if isinstance(stored, tuple):  # too much for the deadline: its halves in its place
                pieces[0:1] = stored
                continue
            summaries += stored
            pieces.pop(0)
        return summaries, True

    def _store_piece(self, piece: Piece) -> list[dict[str, Any]] | tuple[Piece, ...] | None:
        """One piece stored: retried while the database is away or will not write; stored call by
        call (apart.py) once it refuses the data; its halves returned when it is too much for the
        deadline. None when stopped meanwhile."""
        from django.db import close_old_connections, connection, connections

        delay = 0.1
        apart: StoreApart | None = None
        while True:
            try:
                if apart is None:
                    summaries = self.writer.store(piece.built, piece.new_nodes, piece.used, piece.gaps)
                else:
                    summaries = apart.run()
                self.counters.database_works()  # saved with the batch's counts
                self.counters.over_deadline = 0
                return summaries
            except Exception as exc:  # the database is away or will not write (kept, retried), or refused the data
                if isinstance(exc, Abandoned):  # stopping (deadline.py): no outage; it stays in the spool
                    return None
                self.counters.write_errors += 1
                if apart is None and is_refusal(exc):
                    log.error("recorder: the database refused a batch of %d calls (%s); storing them one by one",
                              len(piece.built), self._error_text(exc))
                    apart = StoreApart(self.writer, piece.traces, piece.built, piece.new_nodes, piece.used,
                                       piece.gaps, self.writer.redaction, self._unstorable)
                    continue
                self.counters.database_fails(self._error_text(exc))
                close_quietly(connection)
                # The thread's own connection, not the proxy: the watchdog's thread would see its own.
                too_long = apart is None and on_the_deadline(exc) and answers(self.writer.deadline,
                                                                               connections["default"], self.stop)
                if too_long and len(piece.built) > 1:
                    self.counters.halved += 1
                    log.warning("recorder: a batch of %d calls took longer than the deadline while the database "
                                "answers; storing it in halves", len(piece.built))
                    return tuple(piece.halves())
                if too_long:
                    self.counters.held[OVER_DEADLINE] = self.counters.held.get(OVER_DEADLINE, 0) + 1
                    self.counters.over_deadline = len(piece.built)
                    note_over_deadline(len(piece.built), self.writer.deadline, self.counters.database_error)
                else:
                    log.error("recorder: writing %d calls failed (%s); retrying in %.1fs", len(piece.built),
                              self.counters.database_error, delay)
                self._save_counters()
                close_old_connections()
                if self.stop.wait(delay):
                    return None
                delay = min(delay * 2, 5.0)

    def _check_database(self) -> None:
        """While idle, a `SELECT 1` each heartbeat, so that /readyz and /metrics tell an
        outage before the next call has to be written."""
        from django.db import connection, connections

        try:
            with Deadline(self.writer.deadline, connections["default"], self.stop), connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            self.counters.database_works()
        except Exception as exc:
            if not isinstance(exc, Abandoned):  # stopping tells nothing of the database
                self.counters.database_fails(self._error_text(exc))
            close_quietly(connection)  # a broken connection is opened again at the next try

    def _error_text(self, exc: BaseException) -> str:
        return bounded_text(f"{type(exc).__name__}: {exc}".strip(), self.writer.redaction, DATABASE_ERROR_TEXT)

    def _unstorable(self, drop: Drop) -> None:
        note_drops([drop])  # an outage here is retried before it is counted
        self._drop(drop.reason, drop.calls)

    def _count(self, summaries: list[dict[str, Any]], raw: int) -> None:
        c = self.counters
        c.written += len(summaries)
        c.raw += raw
        c.batches += 1
        for s in summaries:
            key = f"{s['backend']} {s['verb']} {s['outcome']}"
            c.calls[key] = c.calls.get(key, 0) + 1
        self._save_counters()

    def _drop(self, reason: str, n: int) -> None:
        self.counters.dropped[reason] = self.counters.dropped.get(reason, 0) + n
        self._save_counters()

    def _save_counters(self) -> None:
        self._saved = time.monotonic()
        try:
            write_recorder_counters(self.root, self.counters.as_json())
        except OSError as exc:
            log.warning("recorder: counters not saved: %s", exc)

    def _report(self, force: bool = False) -> None:
        if self.reporter is not None:
            self.reporter.report(force)

    def _publish(self, summaries: list[dict[str, Any]]) -> None:
        if not summaries or self.publisher is None:
            return
        try:
            self.publisher(summaries)
        except Exception:  # a failing live stream never costs a record
            log.exception("recorder: publishing %d live events failed", len(summaries))

    def _maybe_prune(self) -> None:
        from django.db import connections

        if self.retention is None or time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + PRUNE_EVERY
        database = connections["default"]
        try:
            # A Node it deletes that the writer still remembers is found gone when a later call
            # refers to it, and stored again (BatchWriter._touch_nodes), as for any other pass.
            with database.execute_wrapper(each_statement(self.writer.deadline, database, self.stop)):
                prune(self.retention)
        except Exception:  # retention is retried on the next pass; recording goes on
            log.exception("recorder: retention pass failed")
            close_quietly(database)  # maybe shut by its deadline: the next batch opens a new one

    def close(self) -> None:
        self.reader.close()
        if self.publisher is not None and hasattr(self.publisher, "close"):
            self.publisher.close()
