"""The extender listener: a bare HTTP/1.1 server for `POST /extender/...` on its own port.

The scheduler's calls are the hot path; on the main port they pass through uvicorn's ASGI
cycle (scope and message dicts, a task and queues per request). Here the request head is
parsed once by httptools and the body handed to the same routing and engine as the ASGI app
(views.route), so both ports give the same answers, refusals, recording and metrics. The
answer goes out as one write. A refusal, and a per-backend call whose backend has an idle
connection (the scheduler's usual call), are served without a task: the request is written to
the backend from the parser's callback and answered from the backend connection's
(HTTPBackend.begin); a reply that needs more goes on in a task, as every other request does.
A per-backend request of FEED_BYTES or more (by Content-Length) is passed on to its backend
while it arrives (backends/feed.py), not after its last byte; it is answered once it has
arrived whole, and one that never does is not answered (nor recorded) and its backend
connection is closed. It serves only /extender/; everything else is a 404 with the
reason, so that this port can be exposed to the scheduler alone (issue 9: TLS with client
certificates via `ssl`; the source allowlist and the client certificate's names via `allow`;
both set in asgi.py's lifespan).

Bounds: a request body over EXTPROXY_MAX_BODY_BYTES is refused with 413 as soon as that is
known (Content-Length, or while reading a chunked body) and the connection is closed, a URL over
MAX_URL_BYTES with 414 as it arrives (no header is kept but the length and Expect); one
request at a time per connection (reading pauses when bytes of a next request arrive while one
is served, so pipelined requests wait in the socket); an idle keep-alive connection is closed
after IDLE_SECONDS; streamed answers (a reply over EXTPROXY_MAX_REPLY_BYTES) respect the
transport's flow control. At most EXTPROXY_EXTENDER_MAX_CONNECTIONS connections are open at once: one
more is answered 503 as it is accepted and closed (connection_bound.py; a length check on accept,
nothing per read). This module owns the socket side only; what a call does is the engine's.

Over 400 lines because one connection is one state machine (parsing, the bounds, a fed request,
serving and answering share its state); the Listener and start_listener at the end could move out.
"""
from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import time
from collections import deque
from http import HTTPStatus
from typing import Any, Awaitable, Callable, Coroutine

import httptools

from . import metrics
from .aside import aside
from .backends.base import StreamBroken
from .backends.feed import BodyFeed
from .connection_bound import refusal as connection_refusal
from .connection_bound import refused as connection_refused
from .engine import Answer, BackendCall, get_engine
from .views import PREFIX, not_post, refusal, route, too_large

log = logging.getLogger(__name__)

IDLE_SECONDS = 120.0  # an idle keep-alive connection is closed after this (Go keeps them 90 s)
# A check of a new connection (extender_access.ConnectionCheck): None admits it, else the reason
# it is refused, which labels the rejection metric.
Allow = Callable[[asyncio.BaseTransport], "str | None"]
# Requests from this size on start their backend call at their head (module docstring). Below it a
# request comes in one or two reads, and the whole body costs one write instead of one per part.
FEED_BYTES = 256 * 1024
# The scheduler's URLs are its urlPrefix's path and a verb. A longer one is refused (414) as it
# arrives: it was kept whole until its head ended, however long the client made it.
MAX_URL_BYTES = 8192

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def head_bytes(status: int, content_type: str, length: int | None, close: bool) -> bytes:
    reason = _REASONS.get(status, b"Unknown")
    head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\n" % (status, reason, content_type.encode("latin-1"))
    head += b"Content-Length: %d\r\n" % length if length is not None else b"Transfer-Encoding: chunked\r\n"
    if close:
        head += b"Connection: close\r\n"
    return head + b"\r\n"


class RouteCache:
    """Routed extender URLs of the current engine (the scheduler calls a handful, over and over).

    Only successful routes are kept (a refusal is counted each time); at most `size`, and
    forgotten when the engine is replaced (configuration reload, tests).
    """

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._engine: object = None
        self._routes: dict[bytes, tuple[Callable, Any]] = {}

    def get(self, url: bytes) -> tuple[Callable, Any] | None:
        if self._engine is not get_engine():
            return None
        return self._routes.get(url)

    def resolve(self, url: bytes, path: str) -> tuple[Callable, Any] | Answer:
        engine = get_engine()
        routed = route(engine, path)
        if isinstance(routed, Answer):
            return routed
        name, verb, call = routed
        entry = (call, metrics.REQUEST_DURATION.labels(name, verb))
        if self._engine is not engine:
            self._engine, self._routes = engine, {}
        if len(self._routes) < self._size:
            self._routes[url] = entry
        return entry


_routes = RouteCache()


class Fed:
    """A request passed on while it arrives: its body, and its call started at its head."""

    __slots__ = ("feed", "task", "duration", "started")

    def __init__(self, feed: BodyFeed, task: asyncio.Task[Answer], duration: Any) -> None:
        self.feed, self.task, self.duration, self.started = feed, task, duration, time.perf_counter()


class Started:
    """A call in the queue that has started already: a request passed on while it arrived (its
    task), or one begun without a task whose answer needs one (`_serve_now`: the answer to
    stream, or the coroutine that makes it). `timed`: (when it started, its duration histogram),
    None for a refusal. `_serve` runs it to its end, answered or not: it has reached its backend,
    and must be recorded and give its connection back."""

    __slots__ = ("result", "timed")

    def __init__(self, result: Answer | Awaitable[Answer], timed: tuple[float, Any] | None) -> None:
        self.result, self.timed = result, timed


class ExtenderProtocol(asyncio.Protocol):
    """One client connection: parse, serve one request at a time, answer."""

    def __init__(self, limit: int, allow: Allow | None, live: set["ExtenderProtocol"], body_timeout: float = 30.0,
                 max_connections: int = 0) -> None:
        self._limit = limit
        self._max_connections = max_connections
        self._body_timeout = body_timeout
        self._allow = allow
        self._live = live
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        # (method, URL, the body or, for a call that has started already, its Started, keep-alive)
        self._queue: deque[tuple[bytes, bytes, bytes | Started, bool]] = deque()
        self._busy = False
        self._paused = False  # reading stopped: a pipelined request arrived while one is served
        self._closing = False
        self._can_write: asyncio.Future[None] | None = None
        # One idle timer per connection, moved on by the time of the last answer rather than
        # re-created for every request (a timer made and cancelled twice a call on the hot path).
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._body_timer: asyncio.TimerHandle | None = None  # EXTPROXY_BODY_TIMEOUT per request
        self._in_message = False
        self.draining = False  # the listener stops: close after the answer in progress
        self._fed: Fed | None = None  # the request arriving now, when it is passed on as it arrives
        self._begin()

    def _begin(self) -> None:
        self._url = b""
        self._parts: list[bytes] = []
        self._size = 0
        self._length = -1  # the Content-Length (-1: none)
        self._over = False
        self._expect_continue = False
        self._over_url = False

    # asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._live.add(self)
        refused = self._allow(transport) if self._allow is not None else None
        if refused is not None:
            metrics.REJECTED.labels(refused).inc()
            transport.close()
            self._closing = True
            return
        if 0 < self._max_connections < len(self._live):  # the only cost of the bound: on accept
            connection_refused("extender-connections", "EXTPROXY_EXTENDER_MAX_CONNECTIONS", self._max_connections)
            self._refuse_connection(connection_refusal("EXTPROXY_EXTENDER_MAX_CONNECTIONS", self._max_connections))
            return
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        if self._busy and not self._paused and self.transport is not None:
            # One request at a time: a pipelined one waits in the socket. Stopped only when it
            # happens (the scheduler never pipelines), not around every request: each stop and
            # start is an epoll change, two system calls per call on the hot path.
            self._paused = True
            self.transport.pause_reading()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(refusal(400, "protocol upgrades are not served on the extender port", "bad-http"))
        except httptools.HttpParserError as exc:
            self._refuse(refusal(400, f"bad HTTP request: {exc}", "bad-http"))
            return
        if self._over_url and not self._closing:  # a URL that goes on past this read
            self._refuse_long_url()
            return
        if self._in_message and self._body_timer is None and not self._closing:
            # A request that did not arrive whole in one read (the usual one does): 408 after the
            # bound, so that a client dribbling its bytes cannot hold the connection and its buffer.
            self._body_timer = self._loop.call_later(self._body_timeout, self._too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._live.discard(self)
        self._closing = True
        self._abandon_feed()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._body_timer is not None:
            self._body_timer.cancel()
        self._wake_writer()

    def pause_writing(self) -> None:
        self._can_write = self._loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    def _wake_writer(self) -> None:
        waiter, self._can_write = self._can_write, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # httptools callbacks ---------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._in_message = True

    def _refuse_long_url(self) -> None:
        self._refuse(refusal(414, f"request URL over {MAX_URL_BYTES} bytes", "bad-http"))

    def _too_slow(self) -> None:
        self._refuse(refusal(408, f"request body not received within {self._body_timeout:g}s (EXTPROXY_BODY_TIMEOUT)",
                             "body-timeout"))

    def on_url(self, url: bytes) -> None:
        if len(self._url) + len(url) > MAX_URL_BYTES:
            self._over_url = True  # refused once this read is parsed (data_received)
            return
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        # Called for every header of every request: the length first, lower() only on a match.
        size = len(name)
        if size == 14 and name.lower() == b"content-length" and value.strip().isdigit():
            self._length = int(value)
            if self._length > self._limit:
                self._over = True
        elif size == 6 and name.lower() == b"expect" and value.strip().lower() == b"100-continue":
            self._expect_continue = True

    def on_headers_complete(self) -> None:
        if self._over_url:
            self._refuse_long_url()
            return
        if self._over:  # refused before reading the body
            self._refuse(too_large(self._limit))
            return
        if self._expect_continue and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self._length >= FEED_BYTES and not self._busy and not self._queue and not self._closing:
            self._start_feed()

    def _start_feed(self) -> None:
        """Start the backend call of a large per-backend request now, its body to follow."""
        if self._parser.get_method() != b"POST":
            return
        routed = self._routed(self._url)
        if isinstance(routed, Answer):
            return  # refused once the request has arrived, as any other
        call, duration = routed
        if not isinstance(call, BackendCall):
            return  # the combined form: it must have the whole request
        feed = BodyFeed(self._length)
        self._fed = Fed(feed, self._loop.create_task(call.fed(feed)), duration)

    def _abandon_feed(self) -> None:
        """The request being passed on will not arrive whole: its backend call is cancelled."""
        fed, self._fed = self._fed, None
        if fed is not None:
            fed.feed.fail("the scheduler's request did not arrive whole")
            fed.task.cancel()

    def on_body(self, body: bytes) -> None:
        if self._over:
            return
        self._size += len(body)
        if self._size > self._limit:
            self._over = True
            self._parts.clear()
            self._refuse(too_large(self._limit))
            return
        if self._fed is not None:
            self._fed.feed.add(body)
        else:
            self._parts.append(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        if self._closing:
            return
        body: bytes | Started
        method, keep_alive = self._parser.get_method(), self._parser.should_keep_alive()
        if self._fed is not None:
            fed, self._fed = self._fed, None
            fed.feed.finish()
            aside.sent()  # its last part is with the backend: what was put aside runs while it works
            body = Started(fed.task, (fed.started, fed.duration))
        else:
            parts = self._parts
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            if not self._busy and not self._queue and self._serve_now(method, body, keep_alive):
                self._begin()
                return
        self._queue.append((method, self._url, body, keep_alive))
        self._begin()
        if not self._busy:
            self._busy = True
            self._loop.create_task(self._serve())

    # serving ---------------------------------------------------------------------------
    def _serve_now(self, method: bytes, body: bytes, keep_alive: bool) -> bool:
        """Serve the request here and now, without a task, where that can be done: a refusal, or
        a per-backend call its backend can begin (BackendCall.begin), the scheduler's usual call.
        False: `_serve` serves it, as any other (the routing it did here is cached)."""
        routed = self._routed(self._url)
        if isinstance(routed, Answer) or method != b"POST":
            self._busy = True
            self._answered(routed if isinstance(routed, Answer) else not_post(), keep_alive, None)
            return True
        call, duration = routed
        if not isinstance(call, BackendCall):
            return False
        started = time.perf_counter()
        self._busy = True
        if call.begin(body, lambda result: self._answered(result, keep_alive, (started, duration))):
            return True
        self._busy = False
        return False

    def _answered(self, result: Answer | Coroutine[Any, Any, Answer], keep_alive: bool,
                  timed: tuple[float, Any] | None) -> None:
        """The answer to a request `_serve_now` served: written now, or by `_serve` when it is
        still to be made (a coroutine) or streamed. `timed`: (when the call started, its
        duration histogram); None for a refusal."""
        if not isinstance(result, Answer) or result.stream is not None:
            # First in line: requests pipelined behind it were queued after it arrived.
            self._queue.appendleft((b"POST", b"", Started(result, timed), keep_alive))
            self._loop.create_task(self._serve())
            return
        try:
            keep = keep_alive and not self.draining
            self._write(result, keep)
            if timed is not None:
                timed[1].observe(time.perf_counter() - timed[0])
            if not keep:
                self._close()
        except Exception:  # a bug costs this connection, never the listener
            log.exception("extender listener: serving a request failed")
            self._close()
        self._served()

    async def _serve(self) -> None:
        try:
            while self._queue:
                method, url, body, keep_alive = self._queue.popleft()
                if isinstance(body, Started):  # even when closing (see Started)
                    await self._one_started(body, keep_alive and not self.draining)
                elif self._closing:
                    self._queue.clear()  # not started: nobody is left to answer
                    break
                else:
                    await self._one(method, url, body, keep_alive and not self.draining)
                if not keep_alive or self.draining:
                    self._close()
        except Exception:  # a bug costs this connection, never the listener
            log.exception("extender listener: serving a request failed")
            self._close()
        finally:
            self._served()

    def _served(self) -> None:
        """The request in progress is answered: serve those that arrived meanwhile (pipelined),
        else read again and wait, idle."""
        self._busy = False
        if self._closing or self.transport is None:
            return
        if self._queue:
            self._busy = True
            self._loop.create_task(self._serve())
            return
        if self._paused:
            self._paused = False
            self.transport.resume_reading()
        self._arm_idle()

    @staticmethod
    def _routed(url: bytes) -> tuple[Callable, Any] | Answer:
        """(the call, its duration histogram) for an extender URL, or the refusal."""
        routed = _routes.get(url)
        if routed is not None:
            return routed
        path = url.partition(b"?")[0].decode("latin-1")
        if not path.startswith(PREFIX):
            return refusal(404, f"this port serves only {PREFIX}...: {path}", "path")
        return _routes.resolve(url, path)

    async def _one(self, method: bytes, url: bytes, body: bytes, keep_alive: bool) -> None:
        started = time.perf_counter()
        routed = self._routed(url)
        if isinstance(routed, Answer):
            await self._answer(routed, keep_alive)
            return
        if method != b"POST":
            await self._answer(not_post(), keep_alive)
            return
        call, duration = routed
        await self._answer(await call(body), keep_alive)
        duration.observe(time.perf_counter() - started)

    async def _one_started(self, started: Started, keep_alive: bool) -> None:
        result = started.result
        await self._answer(result if isinstance(result, Answer) else await result, keep_alive)
        if started.timed is not None:
            started.timed[1].observe(time.perf_counter() - started.timed[0])

    async def _answer(self, answer: Answer, keep_alive: bool) -> None:
        transport = self.transport
        if transport is None or self._closing:
            if answer.stream is not None:
                await answer.stream.aclose()
            return
        if answer.stream is None:
            self._write(answer, keep_alive)
            return
        await self._stream(transport, answer, keep_alive)

    def _write(self, answer: Answer, keep_alive: bool) -> None:
        """An answer without a stream, in one write (nothing when the connection is closing)."""
        transport = self.transport
        if transport is None or self._closing:
            return
        head = head_bytes(answer.status, answer.content_type, len(answer.body), not keep_alive)
        if len(answer.body) > 65536:
            transport.writelines((head, answer.body))  # one write, no copy of a large body
        else:
            transport.write(head + answer.body)

    async def _stream(self, transport: asyncio.Transport, answer: Answer, keep_alive: bool) -> None:
        """A reply over the reply bound, or a large one relayed: its first part, then the rest as
        it arrives. The head waits for the first body bytes and goes out in one write with them:
        written alone it is one more system call and one more wake-up of the scheduler, on the
        core they may share."""
        assert answer.stream is not None
        chunked = answer.length is None
        head = head_bytes(answer.status, answer.content_type, answer.length, not keep_alive)
        try:
            head = self._write_chunk(transport, head, answer.body, chunked)
            async for chunk in answer.stream:
                if self._closing:
                    break
                head = self._write_chunk(transport, head, chunk, chunked)
                if self._can_write is not None:
                    await self._can_write  # the scheduler reads slower than the backend writes
            else:
                transport.writelines([part for part in (head, b"0\r\n\r\n" if chunked else b"") if part])
                return
        except StreamBroken:
            pass
        finally:
            await answer.stream.aclose()
        self._close()  # the body is not complete: only closing says so

    @staticmethod
    def _write_chunk(transport: asyncio.Transport, head: bytes, data: bytes, chunked: bool) -> bytes:
        """Write `data` after `head` (the answer's head while it is not written yet, else b"") in
        one write; returns what is still to be written before the next data (b"" once written)."""
        if not data:
            return head
        if chunked:
            transport.writelines((head, b"%x\r\n" % len(data), data, b"\r\n"))
        else:
            transport.writelines((head, data))
        return b""

    def _refuse(self, answer: Answer) -> None:
        """Answer at once and close: the rest of this request is not read."""
        if self.transport is not None and not self._closing:
            self.transport.write(head_bytes(answer.status, answer.content_type, len(answer.body), True) + answer.body)
        self._close()

    def _refuse_connection(self, answer: bytes) -> None:
        """Answer a connection as it is accepted, before anything is read, and close it."""
        if self.transport is not None:
            self.transport.write(answer)
        self._close()

    def _close(self) -> None:
        self._closing = True
        self._abandon_feed()
        if self.transport is not None:
            self.transport.close()

    def drain(self) -> None:
        """Stop: close now when idle, else right after the answer in progress."""
        self.draining = True
        if not self._busy:
            self._close()

    def _arm_idle(self) -> None:
        self._idle_since = self._loop.time()
        if self._idle_timer is None:
            self._idle_timer = self._loop.call_later(IDLE_SECONDS, self._idle_check)

    def _idle_check(self) -> None:
        """Close a connection idle for IDLE_SECONDS; one that served meanwhile is checked again later."""
        self._idle_timer = None
        if self._closing:
            return
        if self._busy or self._in_message:  # a request in progress: its own bounds apply
            self._idle_since = self._loop.time()
        left = self._idle_since + IDLE_SECONDS - self._loop.time()
        if left <= 0:
            self._close()
        else:
            self._idle_timer = self._loop.call_later(left, self._idle_check)


class Listener:
    """The listening socket and its connections (asyncio.Server alone would leave those open)."""

    def __init__(self, server: asyncio.Server, live: set[ExtenderProtocol]) -> None:
        self.server = server
        self._live = live

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self, grace: float = 10.0) -> None:
        """No new connections; calls in flight are answered (up to `grace` seconds), then all close."""
        self.server.close()
        for conn in list(self._live):
            conn.drain()
        deadline = time.monotonic() + grace
        while self._live and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self._live):
            conn._close()
        await self.server.wait_closed()


async def start_listener(
    host: str, port: int, *, ssl: ssl_module.SSLContext | None = None, allow: Allow | None = None,
) -> Listener:
    """Listen for extender calls on host:port (see the module docstring for ssl and allow)."""
    from django.conf import settings

    live: set[ExtenderProtocol] = set()

    def connection() -> ExtenderProtocol:
        # The bounds and timeout are read per connection, as the ASGI path reads them per request.
        return ExtenderProtocol(int(settings.EXTPROXY_MAX_BODY_BYTES), allow, live, float(settings.EXTPROXY_BODY_TIMEOUT),
                                int(settings.EXTPROXY_EXTENDER_MAX_CONNECTIONS))

    server = await asyncio.get_running_loop().create_server(connection, host, port, ssl=ssl, backlog=1024)
    log.info("extender listener on %s:%d%s", host, port, " (TLS)" if ssl is not None else "")
    return Listener(server, live)
