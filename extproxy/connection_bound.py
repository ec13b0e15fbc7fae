"""A bound on the connections a port holds open at once: the main port's here, the extender
listener's in listener.py (both answer with `refusal`).

Neither uvicorn nor the listener bounded them: 5,000 idle connections, opened by anyone who
reaches a port, were all kept (5,019 file descriptors in the serving process, RSS 108 -> 133 MB),
and under a 4,096 descriptor limit the dashboard's and the scheduler's calls then failed
(connection reset) until the flood ended. uvicorn's `--limit-concurrency` would not have
helped: it answers 503 only to a request, on a connection it has already accepted and keeps.

Now a connection past EXTPROXY_MAX_CONNECTIONS (websockets included: uvicorn counts them in the
same set) is answered 503 with the reason as soon as it is accepted, and closed, so its
descriptor is freed at once; it is counted in extproxy_rejected_requests_total{reason=
"main-connections"}. Connections already open (a kept-alive one, a dashboard's live socket)
are never touched. A connection that sends no request is closed after EXTPROXY_BODY_TIMEOUT
(header_bound.py), so a slot does not stay taken by an idle client.

Installed once per process by asgi.py, before uvicorn builds its first connection.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from . import metrics
from .ratelog import RateLimitedLog

_INSTALLED = "_extproxy_connection_bound"
log = RateLimitedLog(logging.getLogger("extproxy.connections"), interval=60.0)


def refusal(setting: str, bound: int) -> bytes:
    """The answer to a connection over the bound: written before any request is read."""
    body = (f"this port holds {bound} connections at most ({setting}) and has that many open: "
            "try again later\n").encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\nretry-after: 1\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))


def refused(reason: str, setting: str, bound: int) -> None:
    """Count a refused connection; log it at most once a minute (a flood is one line)."""
    metrics.REJECTED.labels(reason).inc()
    log.emit(logging.WARNING, reason, "a connection was refused: %s connections are open (%s)", bound, setting)


def install(max_connections: Callable[[], int]) -> bool:
    """Bound the connections uvicorn's httptools protocol holds; False when that protocol is not
    available."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return False
    if getattr(HttpToolsProtocol, _INSTALLED, False):
        return True
    connection_made = HttpToolsProtocol.connection_made

    def bounded_connection_made(self: Any, transport: Any) -> None:
        connection_made(self, transport)
        bound = max_connections()
        # self.connections: uvicorn's set of this server's open connections, this one included.
        if bound > 0 and len(self.connections) > bound:
            refused("main-connections", "EXTPROXY_MAX_CONNECTIONS", bound)
            transport.write(refusal("EXTPROXY_MAX_CONNECTIONS", bound))
            transport.close()

    HttpToolsProtocol.connection_made = bounded_connection_made  # type: ignore[method-assign]
    setattr(HttpToolsProtocol, _INSTALLED, True)
    return True
