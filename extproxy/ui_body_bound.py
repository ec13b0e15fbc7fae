"""Bounds on a request body sent to the dashboard, admin and API (the Django side of the port).

Django's ASGI handler reads a whole body before any view, login check or CSRF check runs,
spooling what passes 2.5 MiB to a temporary file: without this, anyone who reaches the port
could have it write an endless body to disk (`Content-Length: 1 TiB` to /healthz was read to the
end), or hold a connection for ever by sending a byte now and then. No page or API call takes a
body near the bound (forms, a token login, a replay's selection), and Django itself refuses a
form or `request.body` larger than DATA_UPLOAD_MAX_MEMORY_SIZE when a view reads it.

A declared length over the bound is answered 413 before a byte of the body is read; a chunked
body is counted as it arrives and cut at the bound (413); a body not in full within
EXTPROXY_BODY_TIMEOUT seconds, 408 (as the extender endpoints answer). Django sees the cut as
the client going away, and answers nothing itself.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

# Not through Django's middleware, so the guards every response of the port carries are set here.
_HEADERS = [(b"content-type", b"text/plain; charset=utf-8"), (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"), (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
            (b"connection", b"close")]


def declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:  # the server refuses such a request before it gets here
                return None
    return None


async def _answer(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [*_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def bound_bodies(app: App, max_bytes: Callable[[], int], timeout: Callable[[], float]) -> App:
    """`app` behind the bounds; the bounds are read per request (settings may change in tests)."""

    async def bounded(scope: Scope, receive: Receive, send: Send) -> None:
        limit = max_bytes()
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            await _answer(send, 413, f"request body of {declared} bytes is over the limit of {limit} bytes "
                                     "(EXTPROXY_MAX_UI_BODY_BYTES)\n")
            return
        deadline: float | None = time.monotonic() + timeout()
        received = 0
        refused: list[tuple[int, str]] = []
        started = False

        async def counted_receive() -> Message:
            nonlocal received, deadline
            if refused:
                return {"type": "http.disconnect"}
            if deadline is None:  # the body is in: what follows is Django waiting for a disconnect
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.001))
            except asyncio.TimeoutError:
                refused.append((408, f"request body not received in full within {timeout():g} s "
                                     "(EXTPROXY_BODY_TIMEOUT)\n"))
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused.append((413, f"request body over the limit of {limit} bytes "
                                         "(EXTPROXY_MAX_UI_BODY_BYTES)\n"))
                    return {"type": "http.disconnect"}
                if not message.get("more_body", False):
                    deadline = None  # a streamed answer (an export) may take as long as it needs
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await app(scope, counted_receive, watched_send)
        if refused and not started:
            await _answer(send, *refused[0])

    return bounded
