"""The background worker that carries out stored replay runs, one at a time, and the recovery
of runs whose process ended.

Bounded: one thread per process, at most MAX_QUEUED runs waiting; `submit` says False when
full (the API answers 429). A run that fails is marked failed with its reason; the worker goes
on with the next. Runs are rate-limited inside (runner.run_replay).

Runs outlive no process: the queue is in memory. So each run this process holds (waiting or
running) carries its owner and a heartbeat (`ReplayRun.owner`, `heartbeat_at`), renewed every
`stale_seconds / 4` by a watcher thread, started with the server (`start_watching`). The same
thread, on start and then on each beat, looks for runs left `queued` or `running` whose
heartbeat is older than `stale_seconds` (EXTPROXY_REPLAY_STALE_SECONDS, default 60; any
replica's: they share the database): a queued one is claimed (one replica wins, by a
conditional update) and carried out here; a running one is marked failed with the reason and
how far it got (its items so far stay; replaying the rest is a new run, not a guess at where
the dead process stopped). A run carried out outside the worker (`manage.py replay`, the
API's `wait`) beats for itself while it runs (`beating`).
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import uuid
from contextlib import contextmanager
from datetime import timedelta
from typing import Iterator

from ..ratelog import RateLimitedLog

log = logging.getLogger(__name__)
_ratelog = RateLimitedLog(log)

MAX_QUEUED = 4
OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:64]  # this process, unique


def stale_seconds() -> float:
    from django.conf import settings

    return float(getattr(settings, "EXTPROXY_REPLAY_STALE_SECONDS", 60.0))


class Worker:
    def __init__(self, max_queued: int = MAX_QUEUED) -> None:
        self._queue: queue.Queue[int] = queue.Queue(maxsize=max_queued)
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()
        self._held: set[int] = set()  # runs waiting here or running here: the heartbeat's
        self.idle = threading.Event()
        self.idle.set()
        self.stop = threading.Event()

    def submit(self, run_id: int) -> bool:
        from django.utils import timezone

        from ..models import ReplayRun

        try:
            self._queue.put_nowait(run_id)
        except queue.Full:
            return False
        with self._lock:
            self._held.add(run_id)
        ReplayRun.objects.filter(pk=run_id).update(owner=OWNER, heartbeat_at=timezone.now())
        self.idle.clear()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="extproxy-replay", daemon=True)
                self._thread.start()
        return True

    def _run(self) -> None:
        from django.db import close_old_connections

        from ..models import ReplayRun
        from .runner import run_replay

        while True:
            run_id = self._queue.get()
            close_old_connections()
            try:
                run = ReplayRun.objects.get(pk=run_id)
                if run.status == "queued":  # not one cancelled while it waited
                    run_replay(run)
            except Exception:  # one run's failure must not stop the worker
                log.exception("replay run %s could not be carried out", run_id)
            finally:
                with self._lock:
                    self._held.discard(run_id)
                close_old_connections()
                if self._queue.empty():
                    self.idle.set()

    # heartbeat and recovery ---------------------------------------------------------------------
    def start_watching(self) -> None:
        """The heartbeat of this process's runs and the recovery of dead processes' runs."""
        with self._lock:
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="extproxy-replay-watch", daemon=True)
                self._watcher.start()

    def stop_watching(self, timeout: float = 5.0) -> None:
        """End the watcher (the server's shutdown); runs held here go stale and are recovered."""
        with self._lock:
            watcher, self._watcher = self._watcher, None
        self.stop.set()
        if watcher is not None:
            watcher.join(timeout)
        self.stop = threading.Event()

    def _watch(self) -> None:
        from django.db import DatabaseError, connection

        stop = self.stop
        while True:
            try:
                self.beat()
                self.recover()
            except DatabaseError as exc:  # the database is down: a line a minute, not a traceback a beat
                _ratelog.emit(logging.WARNING, "database", "replay: heartbeat or recovery failed, database unavailable "
                              "(retried every %gs): %s", max(0.2, stale_seconds() / 4), str(exc).strip())
            except Exception:  # a bug: its traceback, and the watcher goes on
                log.exception("replay: heartbeat or recovery failed")
            finally:
                connection.close()  # hold no connection between beats
            if stop.wait(max(0.2, stale_seconds() / 4)):
                return

    def beat(self) -> None:
        from django.utils import timezone

        from ..models import ReplayRun

        with self._lock:
            held = list(self._held)
        if held:
            ReplayRun.objects.filter(pk__in=held).update(heartbeat_at=timezone.now())

    def recover(self) -> list[int]:
        """Take up the queued runs of dead processes, fail their running ones. Returns the ids
        taken up here."""
        from django.db.models import Q
        from django.utils import timezone

        from ..models import ReplayRun

        now = timezone.now()
        cutoff = now - timedelta(seconds=stale_seconds())
        stale = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, created_at__lt=cutoff)
        taken: list[int] = []
        for run in ReplayRun.objects.filter(stale, status__in=["queued", "running"]).order_by("id"):
            same = ReplayRun.objects.filter(pk=run.pk, status=run.status, heartbeat_at=run.heartbeat_at)
            if run.status == "running":
                error = (f"the process carrying it out ({run.owner or 'unknown'}) stopped after {run.done} of "
                         f"{run.total} calls; start a new run for the rest")
                if same.update(status="failed", error=error, finished_at=now):
                    log.warning("replay run %s: %s", run.pk, error)
                continue
            if self._queue.full():
                break  # left for a later beat, or another replica
            if same.update(owner=OWNER, heartbeat_at=now) and self.submit(run.pk):  # this replica won it
                log.warning("replay run %s: taken up again (its process %s stopped)", run.pk, run.owner or "unknown")
                taken.append(run.pk)
        return taken


@contextmanager
def beating(run_id: int) -> Iterator[None]:
    """Hold `run_id` for this process while the block carries it out in this thread (the
    command's runs, the API's `wait` runs): owner and a heartbeat renewed every
    `stale_seconds / 4` by a thread of its own. Without it a live server's watcher took such a
    run, still running, for one whose process had died and marked it failed."""
    from django.db import connection
    from django.utils import timezone

    from ..models import ReplayRun

    ReplayRun.objects.filter(pk=run_id).update(owner=OWNER, heartbeat_at=timezone.now())
    done = threading.Event()

    def beat() -> None:
        while not done.wait(max(0.2, stale_seconds() / 4)):
            try:
                ReplayRun.objects.filter(pk=run_id).update(heartbeat_at=timezone.now())
            except Exception as exc:  # the database away for a beat: the next one tries again
                _ratelog.emit(logging.WARNING, "beating", "replay %s: heartbeat failed: %s", run_id, exc)
            finally:
                connection.close()

    thread = threading.Thread(target=beat, name=f"extproxy-replay-beat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


_worker: Worker | None = None
_worker_lock = threading.Lock()


def get_worker() -> Worker:
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = Worker()
        return _worker
