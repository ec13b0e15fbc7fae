"""Where the log-in throttles keep their counts: the shared cache (Redis, so the replicas count
together), or this process's own memory while that cache does not answer.

The counts decide whether a log-in is even tried, so a Redis outage made every log-in and every
token request a 500 on every replica, though the database and the dashboard were up. Failing
open instead would let guessing run unbounded for as long as Redis is away; counting in the
process keeps the bound per replica. After a failure the shared cache is left alone for
RETRY_SECONDS, so that a hung Redis costs one socket timeout per process per period, not one per
request. Counts made meanwhile stay local: they expire with their window anyway.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.core.cache import cache as shared
from django.core.cache.backends.locmem import LocMemCache

from .ratelog import RateLimitedLog

RETRY_SECONDS = 10.0
log = RateLimitedLog(logging.getLogger("extproxy.throttling"), interval=60.0)


class ThrottleStore:
    """The few cache calls the throttles make (DRF's SimpleRateThrottle: get and set)."""

    def __init__(self) -> None:
        self.local = LocMemCache("extproxy-throttle-fallback", {"TIMEOUT": None, "OPTIONS": {"MAX_ENTRIES": 100_000}})
        self._lock = threading.Lock()
        self._shared_away_until = 0.0

    def _try_shared(self, call):
        with self._lock:
            if time.monotonic() < self._shared_away_until:
                return False, None
        try:
            return True, call()
        except Exception as exc:  # any client error (refused, timed out, protocol): Redis is away
            with self._lock:
                self._shared_away_until = time.monotonic() + RETRY_SECONDS
            log.emit(logging.WARNING, "throttle-cache-away", "log-in throttle counts kept in this process: "
                     "the shared cache did not answer (%s: %s)", type(exc).__name__, exc)
            return False, None

    def get(self, key: str, default: Any = None) -> Any:
        ok, value = self._try_shared(lambda: shared.get(key, default))
        return value if ok else self.local.get(key, default)

    def get_many(self, keys) -> dict:
        keys = list(keys)
        ok, values = self._try_shared(lambda: shared.get_many(keys))
        return values if ok else self.local.get_many(keys)

    def set(self, key: str, value: Any, timeout: float | None = None) -> None:
        ok, _ = self._try_shared(lambda: shared.set(key, value, timeout))
        if not ok:
            self.local.set(key, value, timeout)


store = ThrottleStore()
