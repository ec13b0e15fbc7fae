"""A request body that is passed on while it still arrives (request cut-through).

The extender listener gets a large request in parts. Holding it until its last byte and only then
sending it on serialises two copies of it on the serving core: the scheduler's upload to extproxy,
then extproxy's upload to the backend (bench/relay_floor.py measures what that costs). With a feed
the backend call starts at the request's head: the parts that arrived are written to the backend
connection at once, and each later part as it arrives. The feed keeps every part: the record needs
the whole body, and a retry on a fresh connection or a redirect sends it again.

One producer (the listener, on the serving loop) and one consumer (the backend exchange, on the
same loop): no locks.
"""
from __future__ import annotations

import asyncio
from typing import Callable

Sink = Callable[[bytes], None]


class FeedBroken(ConnectionError):
    """The request did not arrive whole: the scheduler's connection closed, or its body timed out."""


class BodyFeed:
    """The body of one request of `length` bytes (its Content-Length), arriving in parts."""

    __slots__ = ("length", "_parts", "_sink", "_complete", "_broken", "_waiter", "_whole")

    def __init__(self, length: int) -> None:
        self.length = length
        self._parts: list[bytes] = []
        self._sink: Sink | None = None
        self._complete = False
        self._broken = ""
        self._waiter: asyncio.Future[None] | None = None
        self._whole: bytes | None = None

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def broken(self) -> bool:
        return bool(self._broken)

    # the producer -------------------------------------------------------------------------
    def add(self, part: bytes) -> None:
        self._parts.append(part)
        if self._sink is not None:
            self._sink(part)

    def finish(self) -> None:
        """The last part has arrived."""
        self._complete, self._sink = True, None
        self._wake()

    def fail(self, why: str) -> None:
        """The rest will never arrive; whoever waits for the whole body gets FeedBroken."""
        if not self._complete:
            self._broken, self._sink = why, None
            self._wake()

    # the consumer -------------------------------------------------------------------------
    def attach(self, sink: Sink) -> None:
        """Pass every part to `sink`: those that arrived at once, later ones as they arrive.
        Only one sink at a time (a retry attaches the fresh connection's)."""
        for part in self._parts:
            sink(part)
        self._sink = None if self._complete or self._broken else sink

    def detach(self, sink: Sink) -> None:
        if self._sink is sink:
            self._sink = None

    async def whole(self) -> bytes:
        """The whole body, once its last part has arrived (FeedBroken if it never will)."""
        await self.arrived()
        return self.joined()

    async def arrived(self) -> None:
        """Returns once the last part has arrived (FeedBroken if it never will); joins nothing."""
        while not self._complete:
            if self._broken:
                raise FeedBroken(self._broken)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def joined(self) -> bytes:
        """The parts so far as one bytes object (made once, when the body is complete)."""
        if self._whole is not None:
            return self._whole
        parts = self._parts
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if self._complete:
            self._whole, self._parts = data, [data]
        return data

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
