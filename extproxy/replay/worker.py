"""The background worker that carries out stored replay runs, one at a time.

Bounded: one thread per process, at most MAX_QUEUED runs waiting; `submit` says False when
full (the API answers 429). A run that fails is marked failed with its reason; the worker goes
on with the next. Runs are rate-limited inside (runner.run_replay).
"""
from __future__ import annotations

import logging
import queue
import threading

log = logging.getLogger(__name__)

MAX_QUEUED = 4


class Worker:
    def __init__(self, max_queued: int = MAX_QUEUED) -> None:
        self._queue: queue.Queue[int] = queue.Queue(maxsize=max_queued)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.idle = threading.Event()
        self.idle.set()

    def submit(self, run_id: int) -> bool:
        try:
            self._queue.put_nowait(run_id)
        except queue.Full:
            return False
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
                run_replay(ReplayRun.objects.get(pk=run_id))
            except Exception:  # one run's failure must not stop the worker
                log.exception("replay run %s could not be carried out", run_id)
            finally:
                close_old_connections()
                if self._queue.empty():
                    self.idle.set()


_worker: Worker | None = None
_worker_lock = threading.Lock()


def get_worker() -> Worker:
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = Worker()
        return _worker
