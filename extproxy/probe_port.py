"""The probe port: GET /healthz and /readyz on a port of their own (EXTPROXY_PROBE_PORT), for kubelet.

The main port answers 503 to every connection past EXTPROXY_MAX_CONNECTIONS (connection_bound.py),
kubelet's included: whoever held that many idle connections there failed liveness three times
in a row, and kubelet restarted a process that was serving every connection it held (readiness
took it out of both Services meanwhile). A connection cannot be told to be kubelet's before it
is read, so no share of the main port's bound can be kept for the probes: they get a listener
whose connections only kubelet makes. deploy/'s NetworkPolicy admits nobody to this port;
kubelet's probes come from the pod's own node, which network plugins admit whatever the policy.

It runs on the serving process's own event loop (started by asgi.py's lifespan), so a loop that
is stuck answers nothing here either and liveness still fails then. The answers are health.py's
own, byte for byte the main port's. /healthz is answered on the loop; /readyz reads the spool's
files, so it is computed on a thread of its own: not on the loop (a slow disk would hold every
scheduler call), nor on the default executor's threads, which resolve the backends' names.

Bounds, all tight: kubelet sends one small GET per connection and closes it (keep-alive off).
- EXTPROXY_PROBE_MAX_CONNECTIONS open at once; one more is answered 503 as it is accepted and
  closed (connection_bound.py's answer), counted as `probe-connections`;
- the request's head: MAX_HEAD_BYTES (431, `probe-head`), whole within EXCHANGE_SECONDS of the
  connection (408, `probe-timeout`); a /readyz answer not ready within them is a 503;
- one request per connection, answered with `Connection: close`; nothing after the head is read;
- anything but GET /healthz or /readyz: 404 (`probe-path`) or 405 (`probe-method`), the reason
  as text; bytes that are not HTTP: 400 (`probe-bad-http`).
Refusals are counted in extproxy_rejected_requests_total under those reasons.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Callable

import httptools
from django.http import HttpResponse

from . import health, metrics
from .connection_bound import refusal as connection_refusal
from .connection_bound import refused as connection_refused
from .ratelog import RateLimitedLog

# kubelet's request is ~120 bytes, plus the httpHeaders a probe sets.
MAX_HEAD_BYTES = 4096
# kubelet gives a probe timeoutSeconds (1 s by default) and then counts it failed: past that no
# one waits for the answer, and the connection would only hold a slot of the bound.
EXCHANGE_SECONDS = 2.0

log = RateLimitedLog(logging.getLogger("extproxy.probes"), interval=60.0)
# One thread: readiness checks come every few seconds, and a disk that hangs one of them holds
# this thread only (the next are answered 503 at EXCHANGE_SECONDS: not ready, which is true).
_readiness_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extproxy-readiness")
# path -> (the answer, computed on _readiness_thread rather than on the loop)
ANSWERS: dict[bytes, tuple[Callable[[], HttpResponse], bool]] = {
    b"/healthz": (health.alive, False), b"/readyz": (health.ready, True)}


def answer_bytes(status: int, content_type: str, body: bytes, extra: bytes = b"") -> bytes:
    reason = HTTPStatus(status).phrase.encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\ncache-control: no-store\r\n"
            b"x-content-type-options: nosniff\r\n%sconnection: close\r\n\r\n%s"
            % (status, reason, content_type.encode("latin-1"), len(body), extra, body))


def refusal(status: int, text: str, reason: str, extra: bytes = b"") -> bytes:
    """A refused request's answer: the reason as text, counted under `reason`."""
    metrics.REJECTED.labels(reason).inc()
    return answer_bytes(status, "text/plain; charset=utf-8", (text + "\n").encode(), extra)


def shown(path: bytes) -> str:
    """A client's path, told back as plain ASCII text of bounded length."""
    return path[:200].decode("ascii", "backslashreplace")


class ProbeProtocol(asyncio.Protocol):
    """One connection: one request's head, its answer, closed."""

    def __init__(self, live: set["ProbeProtocol"], max_connections: int) -> None:
        self._live = live
        self._max_connections = max_connections
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._url = b""
        self._received = 0  # bytes read, while the head has not ended
        self._head_bytes = 0  # the request line's URL and the headers, as parsed
        self._head_done = False
        self._done = False  # answered (or closed): nothing more is read or written
        self._timer: asyncio.TimerHandle | None = None
        self._pending: asyncio.Future[HttpResponse] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._live.add(self)
        if 0 < self._max_connections < len(self._live):
            connection_refused("probe-connections", "EXTPROXY_PROBE_MAX_CONNECTIONS", self._max_connections)
            self.finish(connection_refusal("EXTPROXY_PROBE_MAX_CONNECTIONS", self._max_connections))
            return
        self._timer = self._loop.call_later(EXCHANGE_SECONDS, self._out_of_time)

    def data_received(self, data: bytes) -> None:
        if self._done:
            return
        if not self._head_done:
            self._received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # answered at the end of its head, as any other request
        except httptools.HttpParserError as exc:
            if not self._done:
                self.finish(refusal(400, f"not an HTTP/1.1 request: {exc}", "probe-bad-http"))
            return
        # Checked after parsing: the read that ends a head may carry more.
        if not self._head_done and self._received > MAX_HEAD_BYTES:
            self.finish(refusal(431, f"request head over {MAX_HEAD_BYTES} bytes", "probe-head"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._live.discard(self)
        self._done = True
        self._stop_waiting()

    # httptools callbacks -----------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self._head_bytes += len(url)
        if len(self._url) <= MAX_HEAD_BYTES:  # beyond it the head is refused
            self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4  # ": " and CRLF

    def on_headers_complete(self) -> None:
        if self._head_done:  # a second request in the same read: only the first is answered
            return
        self._head_done = True
        if self._head_bytes > MAX_HEAD_BYTES:  # a head that came whole in one read
            self.finish(refusal(431, f"request head over {MAX_HEAD_BYTES} bytes", "probe-head"))
            return
        path = self._url.partition(b"?")[0]
        found = ANSWERS.get(path)
        if found is None:
            self.finish(refusal(404, f"this port answers GET /healthz and GET /readyz only, not {shown(path)}",
                                "probe-path"))
            return
        if self._parser.get_method() != b"GET":
            method = shown(self._parser.get_method())
            self.finish(refusal(405, f"this port answers GET only, not {method}", "probe-method", b"allow: GET\r\n"))
            return
        make, on_thread = found
        if not on_thread:
            self.finish(response_bytes(make()))
            return
        self._pending = asyncio.wrap_future(_readiness_thread.submit(make), loop=self._loop)
        self._pending.add_done_callback(self._computed)

    # answering ---------------------------------------------------------------------------
    def _computed(self, pending: asyncio.Future[HttpResponse]) -> None:
        if self._done or pending.cancelled():
            return
        error = pending.exception()
        if error is not None:  # the main port's Django would answer 500 too
            logging.getLogger("extproxy.probes").error("the readiness check failed", exc_info=error)
            self.finish(answer_bytes(500, "text/plain; charset=utf-8", b"the readiness check failed\n"))
            return
        self.finish(response_bytes(pending.result()))

    def _out_of_time(self) -> None:
        self._timer = None
        if self._done:
            return
        if not self._head_done:
            self.finish(refusal(408, f"request not received in full within {EXCHANGE_SECONDS:g} s", "probe-timeout"))
            return
        log.emit(logging.WARNING, "readiness", "the readiness check took longer than %g s", EXCHANGE_SECONDS)
        self.finish(answer_bytes(503, "text/plain; charset=utf-8",
                                 b"the readiness check did not finish within %g s\n" % EXCHANGE_SECONDS))

    def finish(self, answer: bytes) -> None:
        """Write the answer and close; nothing more is read."""
        self._done = True
        self._stop_waiting()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()

    def _stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()  # a check still queued for the thread is not run


def response_bytes(response: HttpResponse) -> bytes:
    return answer_bytes(response.status_code, response["Content-Type"], response.content)


class ProbeListener:
    """The listening socket and its connections."""

    def __init__(self, server: asyncio.Server, live: set[ProbeProtocol]) -> None:
        self.server = server
        self._live = live

    @property
    def port(self) -> int:
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.server.close()
        for connection in list(self._live):  # a probe is answered in microseconds: none to wait for
            if connection.transport is not None:
                connection.transport.close()
        await self.server.wait_closed()


async def start_probe_listener(host: str, port: int, max_connections: int) -> ProbeListener:
    live: set[ProbeProtocol] = set()
    server = await asyncio.get_running_loop().create_server(lambda: ProbeProtocol(live, max_connections), host, port)
    logging.getLogger("extproxy.probes").info("probe listener on %s:%d", host, port)
    return ProbeListener(server, live)

