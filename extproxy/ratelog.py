"""One log line per kind per interval, however often a problem repeats.

Bad input can arrive on every request; a traceback per request would flood the log and cost
the hot path. `RateLimitedLog.emit(kind, ...)` writes the first occurrence of a kind, then at
most one line per `interval` seconds saying how many were left out meanwhile. Thread-safe.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref


class RateLimitedLog:
    # Every instance, so that what they remember can be forgotten at once (`forget_all`).
    _instances: weakref.WeakSet[RateLimitedLog] = weakref.WeakSet()

    def __init__(self, logger: logging.Logger, interval: float = 60.0) -> None:
        self.logger = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}
        self._lock = threading.Lock()
        RateLimitedLog._instances.add(self)

    @classmethod
    def forget_all(cls) -> None:
        """Every kind logs again on its next occurrence. The logs are module globals, so without
        this whether a line is written depends on what the process did before (tests: each test
        starts from none)."""
        for instance in list(cls._instances):
            with instance._lock:
                instance._last.clear()
                instance._skipped.clear()

    def emit(self, level: int, kind: str, message: str, *args: object, exc_info: bool = False) -> bool:
        """Log unless `kind` was logged less than `interval` ago; True when it was logged."""
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.interval:
                self._skipped[kind] = self._skipped.get(kind, 0) + 1
                return False
            self._last[kind] = now
            skipped = self._skipped.pop(kind, 0)
            if len(self._last) > 1000:  # kinds come from code, but bound them anyway
                self._last = {kind: now}
        if skipped:
            message += " (%d more like it in the last %.0fs not logged)"
            args = (*args, skipped, self.interval)
        self.logger.log(level, message, *args, exc_info=exc_info or None)
        return True
