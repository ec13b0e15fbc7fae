"""One keep-alive HTTP/1.1 connection to a backend, parsed by httptools (wire.py's building block).

Owns the bytes of one exchange at a time: writes a request, parses the reply head and body as
they arrive, buffers at most what the caller reads (flow control for streamed bodies), and says
precisely how an exchange failed. Pools, redirects and timeouts are wire.py's.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import AsyncGenerator, Callable

import httptools

READ_HIGH_WATER = 1 << 20  # bytes buffered for a streamed reply before reading pauses


class WireError(ConnectionError):
    """The exchange failed at the transport or HTTP level (not a timeout)."""


class TooManyRedirects(WireError):
    pass


class ConnectFailed(WireError):
    pass


class Closed(WireError):
    """The server closed the connection before a complete reply."""

    def __init__(self, message: str, got_bytes: bool) -> None:
        super().__init__(message)
        self.got_bytes = got_bytes


class Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.idle_since = time.monotonic()
        self.used = 0
        self.holds_slot = False  # counted in its pool's limit until released
        self._lost = False
        self._wake: asyncio.Future[None] | None = None
        # Called instead of waking a waiter, while set: an exchange followed by callbacks, not
        # by a task (wire.Client.begin). It reads the state and unsets itself when done with it.
        self.watcher: Callable[[], None] | None = None
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._parts: deque[bytes] = deque()
        self._buffered = 0
        self.received = 0  # reply bytes seen (head included) for this exchange
        self.complete = False
        self._keep_alive = False
        self._error: BaseException | None = None
        self._paused = False
        self._streaming = False
        self.close_after = False  # not reusable whatever the reply says (a request not sent whole)

    # asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._error = WireError(f"bad HTTP reply: {exc}")
            self._close()
        self._notify()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if not self.complete and self._error is None:
            if self.status and not self._has_length():
                self.complete = True  # a reply delimited by the end of the connection
            else:
                self._error = Closed(
                    "the backend closed the connection without an answer" if not self.status
                    else "the backend closed the connection before the end of its reply",
                    self.received > 0,
                )
        self._notify()

    # httptools callbacks ---------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        self._parts.append(body)
        self._buffered += len(body)
        if self._streaming and not self._paused and self._buffered >= READ_HIGH_WATER and self.transport is not None:
            self._paused = True  # the consumer (the scheduler's connection) lags: stop reading
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.complete = True
        self._keep_alive = self._parser.should_keep_alive()  # only valid inside this callback

    # the exchange ----------------------------------------------------------------------
    def _notify(self) -> None:
        if self.watcher is not None:
            self.watcher()
            return
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._wake = self._loop.create_future()
        try:
            await self._wake
        finally:
            self._wake = None
        if self._error is not None:
            raise self._error

    @property
    def usable(self) -> bool:
        return not self._lost and self.transport is not None and not self.transport.is_closing()

    def _has_length(self) -> bool:
        return any(n in (b"content-length", b"transfer-encoding") for n, _ in self.headers)

    def header(self, name: bytes) -> bytes | None:
        for n, v in self.headers:
            if n == name:
                return v
        return None

    def send(self, head: bytes, body: bytes | None) -> None:
        self._reset()
        self.used += 1
        assert self.transport is not None
        if body and len(body) > 65536:
            self.transport.writelines((head, body))  # one write, no copy of a large body
        else:
            self.transport.write(head + body if body else head)

    async def read_head(self) -> None:
        while not self.status:
            await self._wait()

    def content_length(self) -> int | None:
        value = self.header(b"content-length")
        return int(value) if value is not None and value.isdigit() else None

    async def read_at_most(self, limit: int) -> tuple[bytes, bytes | None]:
        """(body, None) when the whole body fits in `limit`; else (first `limit` bytes, overflow)."""
        while not self.complete and self._buffered <= limit:
            await self._wait()
        data = self.take_body()
        if len(data) <= limit:
            return data, None
        return data[:limit], data[limit:]

    def take_body(self) -> bytes:
        """The body bytes buffered so far, taken out of the buffer."""
        data = b"".join(self._parts) if len(self._parts) != 1 else self._parts[0]
        self._parts.clear()
        self._buffered = 0
        return data

    @property
    def failed(self) -> bool:
        """The exchange failed (a bad reply, or the connection closed before the reply's end)."""
        return self._error is not None

    async def rest(self) -> AsyncGenerator[bytes, None]:
        """The remaining body chunks; reading pauses while more than READ_HIGH_WATER is buffered."""
        self._streaming = True
        while True:
            while self._parts:
                chunk = self._parts.popleft()
                self._buffered -= len(chunk)
                if self._paused and self._buffered < READ_HIGH_WATER // 2 and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield chunk
            if self.complete:
                return
            await self._wait()

    @property
    def reusable(self) -> bool:
        return self.complete and self._keep_alive and self.usable and not self._parts and not self.close_after

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        self._lost = True
        self._close()

    def close_now(self) -> None:
        """Closed without TLS's close_notify exchange: when the pool is closed (shutdown, a new
        configuration), a TLS connection's graceful close needs the event loop after it may have
        stopped, and leaves an unclosed transport behind. A plain one closes at once anyway."""
        self._lost = True
        if self.transport is None:
            return
        if self.transport.get_extra_info("ssl_object") is not None:
            self.transport.abort()
        else:
            self.transport.close()
