"""A bound on the size of a request's head (request line and headers) on the main port.

uvicorn's httptools protocol keeps every header of a request, with no bound on their number or
size, before the application sees any of it: 200,000 headers (18 MiB) to /healthz were
answered 200 and took the serving process from 135 to 263 MB, one 20 MiB header likewise, from
anyone who reaches the port, no login needed. uvicorn has no option for it (h11's
`--h11-max-incomplete-event-size` does not apply to httptools), so the protocol's input is
counted here: while a request's head has not ended, the bytes received for it are added up,
and past EXTPROXY_MAX_HEADER_BYTES the connection is answered 431 and closed. A browser's head
(cookies included) is a few KiB; kube-scheduler's, a few hundred bytes.

Installed once per process by asgi.py, before uvicorn builds its first connection.
"""
from __future__ import annotations

from typing import Any, Callable

_INSTALLED = "_extproxy_head_bound"


def _refusal(limit: int) -> bytes:
    text = f"request head over the limit of {limit} bytes (EXTPROXY_MAX_HEADER_BYTES)\n".encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"x-content-type-options: nosniff\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text))


def install(max_bytes: Callable[[], int]) -> bool:
    """Bound the head of every request uvicorn's httptools protocol reads; False when that
    protocol is not available (h11 bounds a head itself)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return False
    if getattr(HttpToolsProtocol, _INSTALLED, False):
        return True
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
            if not self.transport.is_closing():
                self.transport.write(_refusal(limit))
                self.transport.close()

    def counted_headers_complete(self: Any) -> None:
        self._head_open = False
        on_headers_complete(self)

    def counted_message_complete(self: Any) -> None:
        self._head_open, self._head_bytes = True, 0  # a kept-alive connection's next request
        on_message_complete(self)

    HttpToolsProtocol.data_received = bounded_data_received  # type: ignore[method-assign]
    HttpToolsProtocol.on_headers_complete = counted_headers_complete  # type: ignore[method-assign]
    HttpToolsProtocol.on_message_complete = counted_message_complete  # type: ignore[method-assign]
    setattr(HttpToolsProtocol, _INSTALLED, True)
    return True
