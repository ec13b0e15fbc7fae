"""Work put aside on the serving loop until the loop would otherwise wait for a backend.

On the hot path, CPU spent between a backend's reply and the scheduler's answer, or between that
answer and the scheduler's next request, is latency: the core that runs extproxy may also run
its caller, and at one caller nothing else overlaps it. A call's bookkeeping (its Trace built
and handed to the spool writer, its backend's duration observed) changes nothing the scheduler gets. So
it is put aside here and runs right after the next backend request has been written (`sent`),
while the loop would wait for the backend's answer, and at the latest RUN_WITHIN seconds after
it was put aside, when no further call comes.

Only on the serving loop, bound at start-up: anywhere else work runs at once. Nothing put aside
is dropped: at MAX_WAITING items everything waiting runs at once, and `run_now` runs it (the
recorder's flush and stop, the server's shutdown). This module owns only the scheduling; what runs is
the caller's.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

# Seconds: the longest work waits when no backend call comes to run it. Longer than the next
# call takes to reach its backend when calls follow one another: at 2 ms the timer could fire while a
# full-object request was still arriving, and the record's hand-over (~1.7 ms of CPU with the
# spool-writer's deflate, bench/README.md "Eighth pass") landed on that call; run at its `sent`
# it overlaps the backend's work. At 2 ms the full-object p50 was 0.4-3.0 ms
# higher in 11 pairs of runs (bench/README.md, "Ninth pass"). Only a record's way to the spool
# waits this long, and /metrics' queue depth counts it meanwhile (SpoolRecorder.unspooled).
RUN_WITHIN = 0.02
MAX_WAITING = 1024  # items; more run at once (a loop that never waits on a backend)


class Aside:
    """One per process (`aside`); puts work aside only on the loop it is bound to: the serving
    loop, bound by the server's start-up (asgi.py). Everywhere else (a replay's loop, the heavy
    lane, a tool, before start-up) work runs at once."""

    def __init__(self) -> None:
        self._work: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0  # the bound loop's thread; 0 matches none
        self._timer: asyncio.TimerHandle | None = None
        self._soon = False  # a run is scheduled on the loop's ready queue
        self._running = threading.Lock()

    @property
    def waiting(self) -> int:
        return len(self._work)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop work is put aside on; None when unbound."""
        return self._loop

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Put work aside on `loop` (the caller's thread's) from now on."""
        self.run_now()  # anything left from a loop bound before (tests start servers in turn)
        self._loop, self._thread, self._timer, self._soon = loop, threading.get_ident(), None, False

    def unbind(self) -> None:
        """Run what waits; from now on work runs at once (the server stops)."""
        self._thread, self._loop = 0, None  # in this order: put() reads the thread first
        self.run_now()

    def put(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn(*args) later on the bound loop; at once anywhere else, or past the bound."""
        if threading.get_ident() != self._thread or self._loop.is_closed():  # type: ignore[union-attr]
            loop = self._loop
            if self._work and loop is not None and loop.is_closed():
                self.run_now()  # a loop that closed without unbinding (tests): its work first
            fn(*args)
            return
        self._work.append((fn, args))
        if len(self._work) >= MAX_WAITING:
            self._disarm()
            self.run_now()
        elif self._timer is None:
            self._timer = self._loop.call_later(RUN_WITHIN, self._tick)  # type: ignore[union-attr]

    def sent(self) -> None:
        """A backend request was just written: run what waits once the current task waits for its answer."""
        if self._work and not self._soon and threading.get_ident() == self._thread:
            self._soon = True
            self._loop.call_soon(self._scheduled)  # type: ignore[union-attr]

    def run_now(self) -> None:
        """Run everything waiting, here. Any thread may (the recorder's flush and stop): the work
        is the caller's and thread-safe; one run at a time, so that a run that returns has seen
        every item put aside before it was called, run by itself or by the one it waited for."""
        with self._running:
            work, self._work = self._work, []
            for fn, args in work:
                try:
                    fn(*args)
                except Exception:  # one call's bookkeeping must not cost the others'
                    log.exception("extproxy: work put aside failed")

    def _scheduled(self) -> None:
        self._soon = False
        self._disarm()
        self.run_now()

    def _disarm(self) -> None:
        """The timer was armed for work that runs now. Left armed, it would run work put aside
        after it early, at whatever point a later call has reached (on the serving loop)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._timer = None
        self.run_now()


aside = Aside()
