"""Bounds on a request's head (request line and headers) on the main port: its size and time.

uvicorn's httptools protocol keeps every header of a request, with no bound on their number or
size, before the application sees any of it: 200,000 headers (18 MiB) to /healthz were
answered 200 and took the serving process from 135 to 263 MB, one 20 MiB header likewise, from
anyone who reaches the port, no login needed. uvicorn has no option for it (h11's
`--h11-max-incomplete-event-size` does not apply to httptools), so the protocol's input is
counted here: while a request's head has not ended, the bytes received for it are added up,
and past EXTPROXY_MAX_HEADER_BYTES the connection is answered 431 and closed. A browser's head
(cookies included) is a few KiB; kube-scheduler's, a few hundred bytes.

Nor does uvicorn time a head: a connection that sent nothing, or half a header, stayed open
for as long as the client liked (seen for 50 s, then left), each holding a socket. Now a head
not complete within EXTPROXY_BODY_TIMEOUT of the connection's start (or of the previous answer
on a kept-alive connection) is answered 408 and closed. uvicorn's own keep-alive timeout still
closes an idle connection sooner after an answer.

Its cost is on the scheduler's calls where they use the main port (the embedded defaults). With a
timer started and cancelled per request it was +7 to +24 µs p50 on a ~600 µs names N=1000 call in
six side-by-side runs; with one timer per connection, -22 to +35 µs, mean +6, within the runs'
spread (bench/head_bound_cost.py, bench/README.md).

Installed once per process by asgi.py, before uvicorn builds its first connection.
"""
from __future__ import annotations

from typing import Any, Callable

_INSTALLED = "_extproxy_head_bound"


def _refusal(status: bytes, text: str) -> bytes:
    body = text.encode()
    return (b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\nx-content-type-options: nosniff\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (status, len(body), body))


def _refuse(protocol: Any, answer: bytes) -> None:
    if not protocol.transport.is_closing():
        protocol.transport.write(answer)
        protocol.transport.close()


def install(max_bytes: Callable[[], int], head_timeout: Callable[[], float]) -> bool:
    """Bound the head of every request uvicorn's httptools protocol reads; False when that
    protocol is not available (h11 bounds a head itself)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return False
    if getattr(HttpToolsProtocol, _INSTALLED, False):
        return True
    connection_made = HttpToolsProtocol.connection_made
    connection_lost = HttpToolsProtocol.connection_lost
    data_received = HttpToolsProtocol.data_received
    on_headers_complete = HttpToolsProtocol.on_headers_complete
    on_message_complete = HttpToolsProtocol.on_message_complete

    def bounded_data_received(self: Any, data: bytes) -> None:
        in_head = self.__dict__.get("_head_open", True)  # a new connection starts with a head
        if in_head:
            self._head_bytes = self.__dict__.get("_head_bytes", 0) + len(data)
        data_received(self, data)
        # Checked after the parser has read the data: a chunk that ends the head may carry body too.
        limit = max_bytes()
        if self.__dict__.get("_head_open", True) and self.__dict__.get("_head_bytes", 0) > limit:
            _refuse(self, _refusal(b"431 Request Header Fields Too Large",
                                   f"request head over the limit of {limit} bytes (EXTPROXY_MAX_HEADER_BYTES)\n"))

    # The head's clock: when the head began waiting (`_head_since`), and one timer per
    # connection that looks at it when it fires and sets itself again for what is left. A timer
    # started and cancelled for every request cost the scheduler's calls 7-24 µs each
    # (bench/head_bound_cost.py); setting `_head_since` costs a clock read.
    def head_check(self: Any) -> None:
        self._head_timer = None
        answering = self.cycle is not None and not self.cycle.response_complete  # a long export, say
        if not self.__dict__.get("_head_open", True) or answering:
            return  # a request being read or answered: its end starts the next head's clock
        left = self._head_since + head_timeout() - self.loop.time()
        if left > 0:  # the head began after the timer was set (a kept-alive connection's next one)
            self._head_timer = self.loop.call_later(left, head_check, self)
            return
        _refuse(self, _refusal(b"408 Request Timeout", f"request head not received in full within "
                                                      f"{head_timeout():g} s (EXTPROXY_BODY_TIMEOUT)\n"))

    def start_head_clock(self: Any) -> None:
        self._head_since = self.loop.time()
        if self.__dict__.get("_head_timer") is None:
            self._head_timer = self.loop.call_later(head_timeout(), head_check, self)

    def timed_connection_made(self: Any, transport: Any) -> None:
        connection_made(self, transport)
        start_head_clock(self)

    def timed_connection_lost(self: Any, exc: Exception | None) -> None:
        timer = self.__dict__.pop("_head_timer", None)
        if timer is not None:
            timer.cancel()
        connection_lost(self, exc)

    def counted_headers_complete(self: Any) -> None:
        self._head_open = False
        on_headers_complete(self)

    def counted_message_complete(self: Any) -> None:
        self._head_open, self._head_bytes = True, 0  # a kept-alive connection's next request
        start_head_clock(self)
        on_message_complete(self)

    HttpToolsProtocol.connection_made = timed_connection_made  # type: ignore[method-assign]
    HttpToolsProtocol.connection_lost = timed_connection_lost  # type: ignore[method-assign]
    HttpToolsProtocol.data_received = bounded_data_received  # type: ignore[method-assign]
    HttpToolsProtocol.on_headers_complete = counted_headers_complete  # type: ignore[method-assign]
    HttpToolsProtocol.on_message_complete = counted_message_complete  # type: ignore[method-assign]
    setattr(HttpToolsProtocol, _INSTALLED, True)
    return True
