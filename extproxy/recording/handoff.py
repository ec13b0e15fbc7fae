"""The serving process's side of recording: `submit` and the spool-writer thread.

Owns the hot path's entry point (`SpoolRecorder.submit`, a non-blocking append to a bounded
in-memory hand-off) and the one thread that encodes what was handed over and appends it to
the spool. Serving never waits on disk: a call handed over wakes the thread (at most every
WAKE_EVERY, else it wakes every HANDOFF_TICK), which writes everything waiting in one write.
Must not decode bodies, judge, or touch the database: that is the recorder process's work.

Bounds and drops, each counted in `extproxy_recorder_dropped_total{reason}` and logged at most
once a second per reason: `queue-full` (the hand-off holds `recording.queueSize` calls or
EXTPROXY_HANDOFF_BYTES of bodies), `spool-full` (the spool is at EXTPROXY_SPOOL_MAX_BYTES;
the alarm gauge `extproxy_spool_full` is 1 meanwhile), `spool-error` (the disk refused the
write), `stopping` (a call answered after shutdown began and after the hand-off was closed).
Each drop is also written down in the spool as a gap record (dropcount.py), so the recorder
keeps it as a RecordingGap and exports of its time range say so. A call answered is tallied
(`answered`) in the writer directory's memory-mapped tally until its record or drop is settled
(unsettled.py): after a SIGKILL, the next writer of the directory counts what never reached
the spool as `killed`.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from pathlib import Path

from .. import metrics
from ..aside import aside
from .observe import COLLECTOR, spool_status
from ..config import RecordingConfig
from .dropcount import DropCounter
from .spool import SpoolSettings
from .gathered_write import SpoolWriteError
from .spool_writer import SpoolWriter
from .trace import Trace, encode_trace
from .unsettled import Unsettled, slots_for

log = logging.getLogger(__name__)

HANDOFF_TICK = 0.01  # seconds between the spool-writer's rounds when nothing wakes it
WAKE_EVERY = 0.001  # seconds: a call handed over wakes an idle spool-writer at most this often
WAKE_AT = 256  # calls waiting that wake the spool-writer at once


def _register(recorder: "SpoolRecorder") -> None:
    """The latest recorder made in this process is the one /metrics reports (the engine's)."""
    if COLLECTOR.source is None:
        metrics.REGISTRY.register(COLLECTOR)
    COLLECTOR.source = recorder


class SpoolRecorder:
    """The hand-off: bounded in memory, drained into the spool by one thread."""

    def __init__(
        self,
        recording: RecordingConfig,
        spool: SpoolSettings,
        handoff_bytes: int = 256 << 20,
        writer_name: str = "serve",
        stop_seconds: float = 5.0,
    ) -> None:
        self.recording = recording
        self.spool = spool
        self.max_calls = max(1, recording.queue_size)
        self.max_bytes = handoff_bytes
        self.writer_name = writer_name
        self.stop_seconds = stop_seconds
        self.drops = DropCounter()
        self.spooled = 0
        self.spool_full = False
        self._queue: deque[Trace] = deque()
        self._bytes = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._woken = 0.0  # when submit last woke the spool-writer
        self._closed = False
        self._thread: threading.Thread | None = None
        self.writer: SpoolWriter | None = None
        self._tally: Unsettled | None = None  # from start() on
        self._live: asyncio.AbstractServer | None = None
        _register(self)

    @classmethod
    def from_settings(cls, recording: RecordingConfig) -> "SpoolRecorder":
        from django.conf import settings

        return cls(
            recording,
            SpoolSettings.from_django(),
            handoff_bytes=settings.EXTPROXY_HANDOFF_BYTES,
            writer_name=settings.EXTPROXY_SPOOL_WRITER,
            stop_seconds=settings.EXTPROXY_SHUTDOWN_FLUSH_SECONDS,
        )

    # hot path ------------------------------------------------------------------------
    @property
    def keeping(self) -> bool:
        """Whether `submit` keeps calls at all: when not, the engine builds no Trace."""
        return self.recording.enabled

    def answered(self, started: float) -> int:
        """A call is answered (its start, epoch seconds): tallied until its record reaches the
        spool or its drop is counted. The slot goes with its Trace (`tally_slot`); -1 before
        start() and after stop()."""
        tally = self._tally
        if tally is None:
            return -1
        try:
            return tally.answered(started)
        except ValueError:  # closed by stop() meanwhile: the call is dropped `stopping`, counted
            return -1

    def submit(self, trace: Trace) -> bool:
        """Hand a trace over without blocking; False (and counted) when it is not kept."""
        if not self.recording.enabled:
            return False
        size = trace.size()
        with self._lock:
            if self._closed:
                self.not_kept("stopping", trace.started_at, trace.tally_slot)
                return False
            if len(self._queue) >= self.max_calls or self._bytes + size > self.max_bytes:
                self.not_kept("queue-full", trace.started_at, trace.tally_slot)
                return False
            self._queue.append(trace)
            self._bytes += size
            waiting = len(self._queue)
        # Woken now, not at its next tick: the engine hands calls over while the serving loop
        # waits for a backend (aside.py), so the thread's round overlaps that wait instead of
        # a tick's batch landing on a later call. At most every WAKE_EVERY: a wake-up costs.
        if not self._wake.is_set():
            now = time.monotonic()
            if waiting >= WAKE_AT or now - self._woken >= WAKE_EVERY:
                self._woken = now
                self._wake.set()
        return True

    def not_kept(self, reason: str, started: float | None, slot: int) -> None:
        """A call answered (tallied in `slot`) and not kept: counted, and mirrored in the tally,
        before it is settled there."""
        self.drops.add(reason, 1, started)
        tally = self._tally
        if tally is not None and slot >= 0:
            try:
                tally.settle(slot)
            except ValueError:  # closed by stop() meanwhile
                pass

    # lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Open the spool and start the spool-writer thread (and, on an event loop, the
        listener through which the recorder process sends live events back).

        Called by the ASGI lifespan's startup; until then calls only fill the hand-off.
        """
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self.writer = SpoolWriter(self.spool, self.writer_name)
            self._take_over_tally(self.writer)
            self._thread = threading.Thread(target=self._run, name="extproxy-spool-writer", daemon=True)
            self._thread.start()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        from .live import start_listener

        task = loop.create_task(start_listener(self.spool.root, self.writer.name))
        task.add_done_callback(self._listening)

    def _take_over_tally(self, writer: SpoolWriter) -> None:
        """A new tally in the writer directory; what the one before it left unsettled (its
        process was killed) is counted now, as drops this process writes down."""
        try:
            tally = Unsettled(writer.directory, slots_for(self.max_calls))
        except OSError as exc:  # recording goes on; only a kill's count is lost
            log.error("recorder: no tally of unsettled calls in %s: %s", writer.directory, exc)
            return
        self.drops.attach(tally)
        for drops in tally.left_behind(writer.resumed):
            log.warning("recorder: %d calls (%s) answered by the last process of spool directory %s never "
                        "reached the spool; counted as dropped", drops.calls, drops.reason, writer.name)
            self.drops.add(drops.reason, drops.calls, drops.first_at, drops.last_at)
        try:
            tally.take_place()  # only now: killed before, the next process counts them again
        except OSError as exc:
            log.error("recorder: no tally of unsettled calls in %s: %s", writer.directory, exc)
            self.drops.attach(None)
            tally.close()
            return
        self._tally = tally

    def _listening(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is not None:
            log.error("recorder: live listener not started: %s", None if task.cancelled() else task.exception())
            return
        self._live = task.result()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop taking calls, write what is waiting into the spool, close it.

        True when everything handed over reached the spool within the timeout.
        """
        timeout = self.stop_seconds if timeout is None else timeout
        aside.run_now()  # calls whose record the serving loop has put aside (aside.py)
        with self._lock:
            self._closed = True
        self._wake.set()
        done = True
        if self._thread is not None:
            self._thread.join(timeout)
            done = not self._thread.is_alive()
        if self._live is not None:
            self._live.close()
        if not done:  # the thread may have taken them from the queue: those it is writing count too
            log.error("recorder: %d calls still in memory at shutdown were not spooled, %d drops not written down;"
                      " the next process of this spool directory counts them as dropped (killed)",
                      len(self._queue) + self._in_flight, self.drops.pending)
        elif self._tally is not None:  # every call settled: nothing in the tally to count
            tally, self._tally = self._tally, None
            self.drops.attach(None)
            tally.remove()
        return done

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything handed over so far is in the spool."""
        aside.run_now()  # calls whose record the serving loop has put aside (aside.py)
        self._wake.set()
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._queue or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.05))
        return True

    # the spool-writer thread ---------------------------------------------------------
    def _run(self) -> None:
        assert self.writer is not None
        try:
            while True:
                self._wake.wait(HANDOFF_TICK)
                self._wake.clear()
                with self._lock:
                    batch = list(self._queue)
                    self._queue.clear()
                    self._in_flight = len(batch)
                    closing = self._closed
                try:
                    # Before the calls, so that a spool with room for little keeps the count.
                    self.drops.write_gap(self.writer, now_please=closing)
                    if batch:
                        self._spool(batch)
                    else:
                        self._sync_quietly()
                        self._finish_aged_quietly()
                except Exception:  # a bug: logged; the thread, and recording, go on
                    log.exception("recorder: a round of the spool-writer failed")
                if closing and not batch:
                    return
        finally:
            self.writer.close()

    def _spool(self, batch: list[Trace]) -> None:
        assert self.writer is not None
        accepted: list[bool] = []
        try:
            accepted = self._append(batch)
        finally:  # whatever happened, flush() must not wait for this batch any longer
            with self._idle:
                self.spooled += accepted.count(True)
                self._bytes -= sum(t.size() for t in batch)
                self._in_flight = 0
                self._idle.notify_all()

    def _append(self, batch: list[Trace]) -> list[bool]:
        """The batch's records appended to the spool; the ones that were not, counted by reason."""
        assert self.writer is not None
        payloads: list[bytes] = []
        try:
            backlog = self.writer.backlog()
        except Exception as exc:  # the append below meets it too (counted there); meanwhile save room
            log.error("recorder: spool not readable: %s: %s", type(exc).__name__, exc)
            backlog = self.spool.max_bytes
        encoded: list[Trace] = []  # the traces of payloads, in order
        for trace in batch:
            try:
                payloads.append(encode_trace(trace, self.spool.compress, self.spool.smallest_deflated(backlog, trace)))
                encoded.append(trace)
                backlog += len(payloads[-1])
            except Exception:  # a field of an unexpected type: a bug, counted, never fatal
                log.exception("recorder: could not encode a %s call", trace.verb)
                self.not_kept("unencodable", trace.started_at, trace.tally_slot)
        tally = self._tally
        if tally is not None:
            tally.writing([t.tally_slot for t in encoded], self.writer.seq + 1)
        try:
            return self._append_encoded(encoded, payloads)
        finally:
            if tally is not None:  # after their drops are counted: a kill in between counts twice, never not at all
                tally.written()

    def _append_encoded(self, encoded: list[Trace], payloads: list[bytes]) -> list[bool]:
        assert self.writer is not None
        failed = 0
        try:
            accepted = self.writer.append(payloads)
        except SpoolWriteError as exc:  # the records whole in the file are spooled (the recorder stores them)
            log.error("recorder: spool write failed: %s", exc)
            accepted, failed = exc.accepted, exc.failed
        except Exception as exc:  # the disk (OSError), or a bug: these calls are counted, the thread goes on
            log.error("recorder: spool write failed: %s: %s", type(exc).__name__, exc,
                      exc_info=not isinstance(exc, OSError))
            accepted, failed = [False] * len(payloads), len(payloads)
        refused = accepted.count(False) - failed  # at the bound
        self.spool_full = refused > 0
        if failed or refused:  # which of the calls not kept failed and which were refused is not known: one span
            started = [t.started_at for t, kept in zip(encoded, accepted) if not kept] or [time.time()]
            first, last = min(started), max(started)
            if failed:
                self.drops.add("spool-error", failed, first, last)
            if refused:
                self.drops.add("spool-full", refused, first, last)
        return accepted

    def _sync_quietly(self) -> None:
        assert self.writer is not None
        try:
            self.writer.maybe_sync()
        except Exception as exc:
            log.error("recorder: spool fsync failed: %s: %s", type(exc).__name__, exc)

    def _finish_aged_quietly(self) -> None:
        assert self.writer is not None
        try:
            self.writer.finish_aged()
        except Exception as exc:  # the disk: once per aged segment (it is let go), the next append tries anew
            log.error("recorder: could not start a new spool segment: %s: %s", type(exc).__name__, exc)

    # status --------------------------------------------------------------------------
    @property
    def dropped(self) -> int:
        """Calls this process answered and could not hand over, all reasons together."""
        return sum(self.drops.counts.values())

    @property
    def queued(self) -> int:
        """Calls in the hand-off or being written to the spool."""
        return len(self._queue) + self._in_flight

    @property
    def unspooled(self) -> int:
        """Calls answered and not yet in the spool: `queued`, and the records the serving loop has
        put aside (aside.py; up to RUN_WITHIN, 20 ms, when no call follows). With recording on,
        the engine puts nothing else aside; with it off, nothing put aside is a record."""
        return self.queued + (aside.waiting if self.keeping else 0)

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def status(self):
        """The spool's depth, bytes and oldest age, as on disk now."""
        writer = self.writer
        if writer is None:
            return spool_status(Path(self.spool.root))
        return spool_status(Path(self.spool.root), {writer.name: writer.seq}, {writer.name: writer.position})
