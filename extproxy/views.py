"""The extender endpoints, as a bare ASGI application in the scheduler's hot path.

`POST /extender/<backend>/<verb>` (per-backend form) and `POST /extender/<verb>` (combined). These requests bypass Django's request
machinery on purpose: no middleware, no CSRF check (the scheduler sends no token), no
APPEND_SLASH redirect (the Go client would turn it into a body-less GET), no thread hop. The
body is read once, bounded by EXTPROXY_MAX_BODY_BYTES (413 above it, checked on
Content-Length before reading and while reading) and by EXTPROXY_BODY_TIMEOUT (408 when the
whole body has not arrived in time). Every refusal is a 4xx with a reason.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

import msgspec

from . import metrics
from .backends.base import StreamBroken
from .engine import Answer, BackendCall, Engine, get_engine
from .extender_access import allowlist
from .protocol import Verb

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

PREFIX = "/extender/"


class BodyTooLarge(Exception):
    pass


class BodyTimeout(Exception):
    pass


async def read_body(scope: Scope, receive: Receive, limit: int, timeout: float | None = None) -> bytes:
    """The whole body; BodyTooLarge above `limit`, BodyTimeout when it takes over `timeout` s."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge
    if timeout is None:
        return await _read_chunks(receive, limit)
    try:
        async with asyncio.timeout(timeout):  # a client that dribbles its body holds memory
            return await _read_chunks(receive, limit)
    except TimeoutError:
        raise BodyTimeout from None


async def _read_chunks(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks) if len(chunks) != 1 else chunks[0]


# Every answer on this port: kube-scheduler reads none of them, and a backend's reply relayed
# as it came (HTML included) must not render nor be framed as a page of the dashboard's origin.
_BROWSER_GUARDS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                   (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'; sandbox")]


def from_a_browser(scope: Scope) -> bool:
    """True for a request a web page made: kube-scheduler sends neither Origin nor Sec-Fetch-Site
    (a browser sends Origin with every POST). A look at each header name, no parsing."""
    for name, value in scope["headers"]:
        if name == b"origin" or (name == b"sec-fetch-site" and value != b"none"):
            return True
    return False


async def respond(send: Send, answer: Answer) -> None:
    headers = [(b"content-type", answer.content_type.encode("latin-1")), *_BROWSER_GUARDS]
    if answer.stream is None:
        headers.append((b"content-length", str(len(answer.body)).encode()))
    elif answer.length is not None:
        headers.append((b"content-length", str(answer.length).encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    if answer.stream is None:
        await send({"type": "http.response.body", "body": answer.body})
        return
    # Over the reply bound: pass the rest on as it arrives (the server applies flow control).
    try:
        await send({"type": "http.response.body", "body": answer.body, "more_body": True})
        async for chunk in answer.stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    except StreamBroken:
        pass  # the head is sent: returning unfinished makes the server drop the connection
    finally:
        await answer.stream.aclose()


def refusal(status: int, reason: str, kind: str) -> Answer:
    metrics.REJECTED.labels(kind).inc()
    return Answer(status, msgspec.json.encode({"error": reason}))


Route = tuple[str, str, Callable[[bytes], Awaitable[Answer]]]


def route(engine: Engine, path: str) -> Route | Answer:
    """(metric name, verb, the call) for an extender path, or the refusal to answer.

    Shared by this ASGI app and the separate extender listener (listener.py).
    """
    backend_name, _, verb_string = path[len(PREFIX):].partition("/")
    verb_string = verb_string.rstrip("/")
    if not verb_string:  # /extender/<verb>: the combined form
        combined_verb = Verb.of(backend_name)
        if combined_verb is None:
            return refusal(404, f"no such endpoint: {path}", "path")
        return "combined", combined_verb, lambda body: engine.combined(combined_verb, body)
    backend = engine.backends.get(backend_name)
    if backend is None:
        return refusal(404, f"unknown backend {backend_name!r}; configured: {sorted(engine.backends)}", "backend")
    verb = backend.config.verb_name(verb_string)
    if verb is None:
        return refusal(404, f"backend {backend_name!r} has no verb {verb_string!r}", "verb")
    return backend_name, verb, BackendCall(engine, backend, verb, verb_string)


def too_large(limit: int) -> Answer:
    return refusal(413, f"request body larger than {limit} bytes (EXTPROXY_MAX_BODY_BYTES)", "too-large")


def not_post() -> Answer:
    return refusal(405, "extender calls are POST requests", "method")


async def extender_app(scope: Scope, receive: Receive, send: Send) -> None:
    started = time.perf_counter()
    client = scope.get("client")
    if not allowlist().allows_host(client[0] if client else None):  # the listener checks at connect
        await respond(send, refusal(403, "source address not allowed to call the extender endpoints "
                                         "(EXTPROXY_EXTENDER_ALLOW)", "not-allowed"))
        return
    routed = route(get_engine(), scope["path"])
    if isinstance(routed, Answer):
        await respond(send, routed)
        return
    name, verb, call = routed
    await serve(scope, receive, send, name, verb, started, call)


async def serve(
    scope: Scope, receive: Receive, send: Send, name: str, verb: str, started: float,
    call: Callable[[bytes], Awaitable[Answer]],
) -> None:
    """The part both forms share: POST only, a bounded body, the answer, its duration."""
    if scope["method"] != "POST":
        await respond(send, not_post())
        return
    if from_a_browser(scope):
        # A page on any site could otherwise post here (a form's text/plain body is read as
        # JSON), reaching the backends and the record in a logged-in operator's name.
        await respond(send, refusal(403, "extender calls come from kube-scheduler, not from a browser "
                                         "(the request carries Origin or Sec-Fetch-Site)", "browser"))
        return
    body = await body_or_refusal(scope, receive, send)
    if body is None:
        return
    await respond(send, await call(body))
    metrics.REQUEST_DURATION.labels(name, verb).observe(time.perf_counter() - started)


async def body_or_refusal(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """The request body, or None after answering 413 (or when the client went away)."""
    from django.conf import settings

    limit = settings.EXTPROXY_MAX_BODY_BYTES
    timeout = settings.EXTPROXY_BODY_TIMEOUT
    try:
        return await read_body(scope, receive, limit, timeout)
    except BodyTooLarge:
        await respond(send, too_large(limit))
    except BodyTimeout:
        await respond(send, refusal(408, f"request body not received within {timeout:g}s (EXTPROXY_BODY_TIMEOUT)", "body-timeout"))
    except ConnectionError:
        pass
    return None
