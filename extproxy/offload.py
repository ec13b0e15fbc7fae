"""The heavy lane: a worker thread with its own event loop for combined calls on large requests.

A combined call decodes the scheduler's request, builds each backend's request, judges each
reply and encodes the answer; on a 10 MB full-object body that is a lot of CPU. Run on the
serving loop, it stalls every other call (and the timers of their per-backend timeouts) for as
long. So a combined call whose request is at least EXTPROXY_OFFLOAD_BYTES runs, whole, on this
lane's loop: the serving loop only hands it over and awaits the result, and keeps serving.
Small calls never leave the serving loop (DESIGN.md: no thread hop per request).

The lane shares the GIL with the serving loop; CPython hands the GIL back every switch
interval, which is set short here, so the serving loop waits at most one interval or one long
C call (a msgspec decode of a whole body, tens of milliseconds) before it runs again. One thread:
large calls interleave on its loop as they wait for their backends; their number is bounded by
the server's connections, and each one's memory by the request and reply bounds.
This module owns only the thread and its loop; what runs there is the caller's.
"""
from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")

SWITCH_INTERVAL = 0.0005  # seconds; CPython's default (5 ms) would add that to the serving loop's waits


class HeavyLane:
    def __init__(self, name: str = "extproxy-heavy") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                if sys.getswitchinterval() > SWITCH_INTERVAL:
                    sys.setswitchinterval(SWITCH_INTERVAL)
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    try:
                        loop.run_forever()
                    finally:
                        loop.run_until_complete(loop.shutdown_asyncgens())
                        loop.close()

                threading.Thread(target=run, name=self._name, daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the lane's loop and wait for its result without blocking this loop."""
        future = asyncio.run_coroutine_threadsafe(coro, self._started())
        return await asyncio.wrap_future(future)

    def stop(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)


lane = HeavyLane()
